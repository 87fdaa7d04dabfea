"""Value pools the families draw names from: fixed lists, so an instance's values never move between versions
(append to a pool only at its end, and only in a new pool: changing one changes every instance that uses it)."""

from __future__ import annotations

from tasks.families.base import Choice, IntRange

APPS = Choice(("cart-api", "orders-api", "billing-svc", "search-api", "auth-svc", "payments-api", "inventory-svc",
               "catalog-api", "checkout-web", "notify-worker", "ledger-api", "profile-svc", "shipping-api",
               "reviews-svc", "media-api", "pricing-svc"))
NAMESPACES = Choice(("shop", "payments", "platform", "core", "retail", "backoffice"))
PORTS = IntRange(8000, 8095, 5)
TABLES = Choice(("orders", "invoices", "customers", "shipments", "payments", "sessions", "events", "audit_log",
                 "line_items", "refunds"))
COLUMNS = Choice(("customer_id", "created_at", "status", "tenant_id", "external_ref", "email", "order_id",
                  "updated_at"))
ROLES = Choice(("reporting", "analytics_ro", "support_app", "billing_batch", "etl_loader", "bi_dashboard"))
BUCKETS = Choice(("acme-logs", "acme-backups", "acme-artifacts", "acme-exports", "acme-media", "acme-reports",
                  "acme-invoices", "acme-audit"))
TEAMS = Choice(("payments", "platform", "growth", "search", "checkout", "data"))
DAYS = Choice((7, 14, 30, 60, 90, 120, 180, 365))
LOG_RETENTION = Choice((1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731))  # CloudWatch's allowed values
IMAGES = Choice(("registry.acme.io/cart-api", "registry.acme.io/orders-api", "ghcr.io/acme/billing",
                 "ghcr.io/acme/search", "registry.acme.io/auth", "ghcr.io/acme/ledger"))
TAGS = Choice(("1.4.2", "2.0.1", "2.3.0", "3.1.7", "1.9.12", "4.0.0-rc1", "2.11.3", "5.2.0"))
HOSTS = Choice(("shop.example.com", "api.example.com", "pay.example.com", "admin.example.com", "m.example.com",
                "partners.example.com"))
CIDRS = Choice(("10.0.0.0/16", "10.20.0.0/16", "10.8.0.0/24", "172.16.0.0/20", "192.168.10.0/24", "10.100.4.0/22"))
