-- streamguard 0.2 -> 0.3: trust round 2 (install-time schema checks,
-- bounded work, server-wide caps) and every supported PostgreSQL major.
\echo Use "ALTER EXTENSION streamguard UPDATE TO '0.3'" to load this file. \quit
