-- 3. drain, streamguard: one poll of up to 1,000 events (-D stream=<name> -D consumer=<name>).
SELECT count(*) FROM streamguard.poll(:stream, :consumer, 1000);
