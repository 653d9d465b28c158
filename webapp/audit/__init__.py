"""The ledger: an append-only audit log whose entries are chained by hash and signed by HMAC.

Services of other apps call `webapp.audit.services` (one line each); this app imports none of
them, so any app may record into it. `manage.py audit_verify` checks the chain.
"""
