-- curves: one poll of up to 100 events of -D stream=<name> by -D consumer=<name>,
-- rolled back, so that every poll reads the same first events.
BEGIN;
SELECT count(*) FROM streamguard.poll(:stream, :consumer, 100);
ROLLBACK;
