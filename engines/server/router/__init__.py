"""An in-repo router in front of in-repo servers: disaggregated prefill/decode (a prefill server,
then a decode server per request) or colocated replicas. Run with `python -m engines.server.router`;
see app.py for what it does and handoff.py for what the servers tell each other."""
from engines.server.router.app import RouterConfig, check_policy, make_router_app

__all__ = ["RouterConfig", "check_policy", "make_router_app"]
