"""The host uid sandboxes run as when we are root, for every backend and the sessions.

A uid of their own, so `kill -1` or ptrace from a sandbox reaches only other sandboxes. Not
`nobody` (other daemons run as it) and outside the ranges adduser, systemd (DynamicUser, homed,
containers) and /etc/subuid hand out. The Docker backend's forked runs use it too (not the
image's user), so that no login user can signal or trace them.
"""

SANDBOX_UID = 65600
