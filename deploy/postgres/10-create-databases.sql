-- Runs once, when the postgres container starts on an empty data volume
-- (mounted into /docker-entrypoint-initdb.d by docker-compose.yml).
-- Each service owns its own database; each creates its tables itself at start-up
-- (goose migrations under a session lock), so nothing else is needed here.
CREATE DATABASE labeling;
CREATE DATABASE billing;
