"""Analysis over a cuptiprof file: scoped views, SQL reports, the read-only Profile."""
