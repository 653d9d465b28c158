"""Service connections: OAuth 2.0 sign-in to services whose tokens stay in the browser."""
