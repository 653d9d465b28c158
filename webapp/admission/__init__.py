"""Admission and rate limiting of the agent API's runs: a token's request rate and runs in
flight (ratelimit), the host's fair share between users (fairshare), the defaults that follow
the machine's cores (capacity), each in this process or shared through Redis (the *_redis
modules), the backend chosen by one setting (backends), and the gate a run passes through
(gate). It knows nothing of tokens or requests: callers pass the keys it counts."""
