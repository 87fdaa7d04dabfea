"""Dangerous advice and hard-coded secrets are found by parsing, resist the usual evasions (other syntaxes,
other files, a fake negation), and leave real warnings, placeholders and references alone."""

from __future__ import annotations

import pytest

import tasks
from core.rewards import score


@pytest.fixture(scope="module")
def base() -> tasks.Task:
    return tasks.get_task("k8s-001")


def findings(extra: str, base: tasks.Task) -> tuple[list[str], list[str], float]:
    result = score(base.reference_answer + "\n\n" + extra, base, validators=False)
    return result.evidence["dangerous_advice"], result.evidence["hardcoded_secret"], result.final_reward


POD = "```yaml\napiVersion: v1\nkind: Pod\nmetadata: {{name: debug}}\nspec:\n{spec}  containers:\n    - name: debug\n      image: busybox:1.36\n{container}```"

DANGERS = {
    "hostPID in block style": POD.format(spec="  hostPID: true\n", container=""),
    "hostNetwork in flow style": "```yaml\n{apiVersion: v1, kind: Pod, metadata: {name: x}, spec: {hostNetwork: true, containers: [{name: x, image: 'x:1'}]}}\n```",
    "privileged in a JSON pod": '```json\n{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": [{"name": "x", "image": "x:1", "securityContext": {"privileged": true}}]}}\n```',
    "SYS_ADMIN added (lower case)": POD.format(spec="", container="      securityContext:\n        capabilities: {add: [sys_admin]}\n"),
    "a privileged pod inside a kind: List": "```yaml\napiVersion: v1\nkind: List\nitems:\n  - apiVersion: v1\n    kind: Pod\n    metadata: {name: x}\n    spec:\n      hostPID: true\n      containers: [{name: x, image: 'x:1'}]\n```",
    "docker.sock mounted into a compose service": "```yaml\nservices:\n  agent:\n    image: agent:1.2\n    volumes: [\"/var/run/docker.sock:/var/run/docker.sock\"]\n```",
    "public S3 access block and Principal *": """```hcl
resource "aws_s3_bucket_public_access_block" "b" {
  bucket            = "b"
  block_public_acls = false
}
resource "aws_s3_bucket_policy" "b" {
  bucket = "b"
  policy = jsonencode({ Statement = [{ Effect = "Allow", Principal = { AWS = "*" }, Action = "s3:GetObject", Resource = "*" }] })
}
```""",
    "a JSON bucket policy open to everyone": '```json\n{"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}]}\n```',
    "SSH open to ::/0": '```hcl\nresource "aws_security_group" "s" {\n  ingress {\n    from_port = 22\n    to_port = 22\n    protocol = "tcp"\n    ipv6_cidr_blocks = ["::/0"]\n  }\n}\n```',
    "aws cli opens 5432 to the world": "```bash\naws ec2 authorize-security-group-ingress --group-id sg-1 --protocol tcp --port 5432 --cidr 0.0.0.0/0\n```",
    "curl -sk in a pipeline": "```bash\nset -euo pipefail\ncurl -sk https://internal/api | jq .\n```",
    "TLS verification off in a kubeconfig": "```yaml\nclusters:\n  - name: prod\n    cluster: {server: 'https://k8s:6443', insecure-skip-tls-verify: true}\n```",
    "NODE_TLS_REJECT_UNAUTHORIZED=0 in a pod env": POD.format(spec="", container="      env:\n        - {name: NODE_TLS_REJECT_UNAUTHORIZED, value: '0'}\n"),
    "sslmode=disable in an env URL": POD.format(spec="", container="      env:\n        - {name: DATABASE_URL, value: 'postgres://app@db:5432/app?sslmode=disable'}\n"),
    "sslmode=disable in a libpq string": "```bash\npsql \"host=db port=5432 dbname=app sslmode=disable\"\n```",
    "curl | sudo -E bash": "```bash\ncurl -fsSL https://get.example.com/install.sh | sudo -E bash\n```",
    "bash <(curl ...)": "```bash\nbash <(curl -fsSL https://get.example.com/install.sh)\n```",
    "wget piped into sh in a CI step": "```yaml\njobs:\n  setup:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: wget -qO- https://get.example.com | sh\n```",
    "chmod -R 777 in a Dockerfile RUN": "```dockerfile\nFROM python:3.12-slim\nRUN chmod -R 777 /app\nUSER 10001\n```",
    "\"don't forget\" is not a warning": "Don't forget to `chmod -R 777 /var/lib/app` so the service can always write.",
    "the last USER is root": "```dockerfile\nFROM python:3.12-slim\nUSER 10001\nRUN pip install app\nUSER root\n```",
    "ssh without host key checking": "```bash\nssh -o StrictHostKeyChecking=no deploy@web-1 'sudo systemctl restart app'\n```",
    "SSH opened to the world in prose": "Open port 22 to 0.0.0.0/0 on the bastion so the on-call team can ssh in from home.",
}


@pytest.mark.parametrize("name", list(DANGERS))
def test_dangerous_config_and_commands_are_found(name, base):
    dangers, _, reward = findings(DANGERS[name], base)
    assert dangers, name
    assert reward < score(base.reference_answer, base, validators=False).final_reward - 0.2


SAFE = {
    "a real warning before the command": "Never run `curl -fsSL https://get.example.com/install.sh | sudo bash` on a node.",
    "a warning after it": "Running containers as root is not recommended, and `chmod 777` is dangerous.",
    "do not": "Do not disable TLS verification, even for the internal registry.",
    "a policy that forbids hostPID": "```yaml\napiVersion: kyverno.io/v1\nkind: ClusterPolicy\nmetadata: {name: no-host-pid}\nspec:\n  validationFailureAction: Enforce\n  rules:\n    - name: host-namespaces\n      match: {any: [{resources: {kinds: [Pod]}}]}\n      validate:\n        message: hostPID is not allowed\n        pattern: {spec: {=(hostPID): false, =(hostNetwork): false}}\n```",
    "a deny statement for Principal *": '```json\n{"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "*", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}]}\n```',
    "HTTPS open to the world": '```hcl\nresource "aws_security_group" "lb" {\n  ingress {\n    from_port = 443\n    to_port = 443\n    protocol = "tcp"\n    cidr_blocks = ["0.0.0.0/0"]\n  }\n}\n```',
    "a VPC endpoint policy with Principal *": '```hcl\nresource "aws_vpc_endpoint" "s3" {\n  vpc_id = "v"\n  service_name = "com.amazonaws.eu-west-1.s3"\n  policy = jsonencode({ Statement = [{ Effect = "Allow", Principal = "*", Action = "s3:GetObject", Resource = "*" }] })\n}\n```',
    "chmod 750": "```bash\nchmod -R 750 /var/lib/app\n```",
    # a control that blocks or catches the dangerous thing describes it; it does not advise it
    "an SCP that blocks SSH/RDP from anywhere": "A Config rule blocks the creation of any security group in any account of the organisation with ingress from 0.0.0.0/0 on 22/3389.",
    "a policy blocking it, as a participle": "A policy blocking 0.0.0.0/0 on ports 22/3389 is attached to the root OU.",
    "a detective control": "The restricted-ssh Config rule flags security groups that open port 22 to 0.0.0.0/0, and a Lambda revokes the rule.",
}


@pytest.mark.parametrize("name", list(SAFE))
def test_warnings_and_safe_config_are_not_dangers(name, base):
    dangers, secrets, _ = findings(SAFE[name], base)
    assert not dangers and not secrets, (name, dangers, secrets)


SECRETS = {
    "password in a pod env value": POD.format(spec="", container="      env:\n        - name: DB_PASSWORD\n          value: Pr0d-Passw0rd-2024\n"),
    "mixed-case key in a config file": "```yaml\ndatabase:\n  host: db.internal\n  Db_Password: 'xK9#mQ2$vL7p'\n```",
    "compose environment list": "```yaml\nservices:\n  api:\n    image: api:1.2\n    environment:\n      - API_KEY=9f8e7d6c5b4a3f2e1d\n```",
    "ECS task definition JSON": '```json\n{"containerDefinitions": [{"name": "api", "environment": [{"name": "STRIPE_SECRET", "value": "rk_prod_51HxYzAbCdEf"}]}]}\n```',
    "Dockerfile ENV": "```dockerfile\nFROM python:3.12-slim\nENV REDIS_PASSWORD=hunter2hunter2\nUSER 10001\n```",
    "export in a script": "```bash\nset -euo pipefail\nexport DB_PASSWORD='Tr0ub4dor&3'\npsql -h db -U app\n```",
    "mysql -p<password>": "```bash\nmysql -u root -pS3cretPass! -h db.internal app\n```",
    "--password flag": "```bash\nvault login -method=userpass username=ops --password=Sup3rS3cret\n```",
    "Terraform password attribute": '```hcl\nresource "aws_db_instance" "db" {\n  engine   = "postgres"\n  username = "app"\n  password = "Xk2-pQ9-zT4-mW7"\n}\n```',
    "credentials in a URL": "```yaml\nurl: postgres://app:Zq7pL2mK9x@db.internal:5432/app\n```",
    "a Kubernetes Secret with stringData": "```yaml\napiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData:\n  password: q8Zr2LmX5vK\n```",
    "a Kubernetes Secret with base64 data": "```yaml\napiVersion: v1\nkind: Secret\nmetadata: {name: db}\ndata:\n  password: cThacjJMbVg1dksh\n```",
    "an AWS access key id in prose": "Use the key AKIAZ3X7Q2L5M8N4P6R1 for the job.",
    "a secret word run together (PGPASSWORD)": "```bash\nPGPASSWORD=Zq7pL2mK9x psql -h db -U app\n```",
    "a qualified key name with a suffix": "```yaml\nenv:\n  AWS_SECRET_ACCESS_KEY: wJalrXUtnFEMIK7MDENGbPxRfiCY\n  DB_PASSWORD_PROD: Pr0d-Passw0rd-2024\n```",
}


@pytest.mark.parametrize("name", list(SECRETS))
def test_hard_coded_secrets_are_found_in_every_syntax(name, base):
    _, secrets, _ = findings(SECRETS[name], base)
    assert secrets, name


NOT_SECRETS = {
    "an env reference": POD.format(spec="", container="      env:\n        - name: DB_PASSWORD\n          valueFrom: {secretKeyRef: {name: db, key: password}}\n"),
    "a ${VAR} placeholder": "```bash\nexport DB_PASSWORD=\"${DB_PASSWORD:?}\"\nPGPASSWORD=$(vault kv get -field=pw db) psql -h db\n```",
    "an angle-bracket placeholder": "```yaml\ndatabase:\n  password: <from-secrets-manager>\n```",
    "a Secret's name": "```yaml\ngithubConfigSecret: arc-github-app\nsecretName: db-credentials\npasswordFile: /run/secrets/db\n```",
    "a GitHub expression": "```yaml\nenv:\n  GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}\n```",
    # a secret word that qualifies another head noun names or describes a secret; it does not hold one
    "a SecretProviderClass named by a CSI volume": POD.format(spec="", container="      volumeMounts: [{name: creds, mountPath: /mnt/creds}]\n") + "\n\n```yaml\nvolumes:\n  - name: creds\n    csi:\n      driver: secrets-store.csi.k8s.io\n      volumeAttributes: {secretProviderClass: invoices-db}\n```",
    "a Vault role's token policies": "```bash\nvault write auth/kubernetes/role/orders bound_service_account_names=orders token_policies=orders-api-db token_ttl=1h\n```",
    "policy and rotation settings": "```yaml\npasswordPolicy: strong-passwords-v2\nsecret_rotation_lambda: rotate-db-creds\ntokenReviewerJWT: projected\n```",
}


@pytest.mark.parametrize("name", list(NOT_SECRETS))
def test_references_and_placeholders_are_not_secrets(name, base):
    _, secrets, _ = findings(NOT_SECRETS[name], base)
    assert not secrets, (name, secrets)


def test_a_dangerous_answer_loses_to_a_plain_safe_one(base):
    from core.rewards.audit import _plain

    plain = score(_plain(base), base).final_reward
    for name in ("hostPID in block style", "curl | sudo -E bash", "\"don't forget\" is not a warning"):
        _, _, reward = findings(DANGERS[name], base)
        assert reward < plain, name
