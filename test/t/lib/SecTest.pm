
# Shared helpers of the security attack suite (10x_security_*.pl;
# docs/security.md): an attacker's toolkit of "evil" look-alikes of built-in
# operators and functions, and the checks that none of them ever ran as
# anyone but the attacker.
#
# The toolkit, installed by an ordinary role into a schema it controls:
#   <schema>.evil_calls (who, what)   every call of a hook, by current_user
#                                     (INSERT granted to PUBLIC, so a call
#                                     by any role is recorded);
#   <schema>.evil_hook(what)          records the call; when the caller is
#                                     not the attacker it also tries to
#                                     escalate: ALTER ROLE <attacker>
#                                     SUPERUSER, GRANT
#                                     pg_execute_server_program TO
#                                     <attacker>, CREATE TABLE
#                                     public.pwned_<tag> (the attacker
#                                     itself has no CREATE on public);
#   operators =, <, >, <=, >=, <> (where a built-in exists), +, - on
#   int4, int8, text (=, <, >, ||) and timestamptz, and the functions
#   now(), clock_timestamp(), unnest(text[]), unnest(bigint[]) — each calls
#   the hook and then returns what the built-in would, so that nothing
#   visibly breaks when they are picked up.
# A statement resolves these instead of pg_catalog's only when the schema
# comes before pg_catalog in its search_path (listed explicitly): exactly
# what a pinned search_path or OPERATOR(pg_catalog.x) prevents.
#
# Every session of the test's own superuser on a database whose settings
# were poisoned pins its search_path first (sec_pin), so the test never
# trips the traps itself.

package SecTest;

use strict;
use warnings;

use Exporter 'import';
use Time::HiRes qw(time usleep);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use RemoteTest;

our @EXPORT = qw(sec_pin sec_val sec_evil_sql sec_install_evil sec_assert_no_escalation
  sec_bootstrap_name sec_make_attacker sec_wait_batches sec_elapsed_call
  sec_state_of);

# prefix for the test's own superuser SQL on a poisoned database
sub sec_pin { return "SET search_path = pg_catalog, pg_temp;\n" }

# one value, as the superuser, search_path pinned; undef on failure
sub sec_val
{
	my ($node, $sql, %opt) = @_;
	my ($ok, $out, $err) = try_psql($node, sec_pin() . $sql, %opt);
	diag("query failed: $sql\n$err") unless $ok;
	return $ok ? $out : undef;
}

# ($ok, $sqlstate, $stderr, $stdout) of one call
sub sec_state_of
{
	my ($node, $sql, %opt) = @_;
	my ($ok, $out, $err) = try_psql($node, $sql, %opt);
	return ($ok, $ok ? '' : sqlstate($err), $err, $out);
}

# run $sql (that may fail) and return (elapsed seconds, ok, stderr)
sub sec_elapsed_call
{
	my ($node, $sql, %opt) = @_;
	my $t0 = time;
	my ($ok, $out, $err) = try_psql($node, $sql, %opt);
	return (time - $t0, $ok, $err);
}

sub sec_bootstrap_name
{
	my ($node) = @_;
	return $node->safe_psql('postgres', 'SELECT rolname FROM pg_catalog.pg_roles WHERE oid = 10');
}

# An ordinary login role that may create schemas in $db and streams.
sub sec_make_attacker
{
	my ($node, $role, %opt) = @_;
	my $db = $opt{dbname} // 'postgres';
	$node->safe_psql($db, sec_pin() . qq{
CREATE ROLE $role LOGIN;
GRANT CREATE ON DATABASE $db TO $role;
GRANT EXECUTE ON FUNCTION streamguard.create_stream(text, int, interval, interval, interval) TO $role;
});
}

# The toolkit as SQL (run it as the attacker; $schema must exist and be
# the attacker's).
sub sec_evil_sql
{
	my (%o) = @_;
	my ($r, $s, $t) = @o{qw(role schema tag)};
	my $sql = qq{
CREATE TABLE $s.evil_calls (who name NOT NULL, what text NOT NULL, PRIMARY KEY (who, what));
GRANT USAGE ON SCHEMA $s TO PUBLIC;
GRANT SELECT, INSERT ON $s.evil_calls TO PUBLIC;
CREATE FUNCTION $s.evil_hook(what text) RETURNS void LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN
	BEGIN
		INSERT INTO $s.evil_calls VALUES (current_user, what) ON CONFLICT DO NOTHING;
	EXCEPTION WHEN OTHERS THEN NULL;
	END;
	IF current_user OPERATOR(pg_catalog.<>) '$r' THEN
		BEGIN EXECUTE 'ALTER ROLE $r SUPERUSER'; EXCEPTION WHEN OTHERS THEN NULL; END;
		BEGIN EXECUTE 'GRANT pg_execute_server_program TO $r'; EXCEPTION WHEN OTHERS THEN NULL; END;
		BEGIN EXECUTE 'CREATE TABLE IF NOT EXISTS public.pwned_$t (who name DEFAULT current_user)';
		EXCEPTION WHEN OTHERS THEN NULL; END;
		BEGIN EXECUTE 'INSERT INTO public.pwned_$t DEFAULT VALUES'; EXCEPTION WHEN OTHERS THEN NULL; END;
	END IF;
END \$f\$;
};
	my @ops = (
		[ 'int4', '=', 'int4eq', 'bool' ], [ 'int4', '<', 'int4lt', 'bool' ],
		[ 'int4', '>', 'int4gt', 'bool' ], [ 'int4', '<=', 'int4le', 'bool' ],
		[ 'int4', '>=', 'int4ge', 'bool' ], [ 'int4', '<>', 'int4ne', 'bool' ],
		[ 'int4', '+', 'int4pl', 'int4' ], [ 'int4', '-', 'int4mi', 'int4' ],
		[ 'int8', '=', 'int8eq', 'bool' ], [ 'int8', '<', 'int8lt', 'bool' ],
		[ 'int8', '>', 'int8gt', 'bool' ], [ 'int8', '<=', 'int8le', 'bool' ],
		[ 'int8', '>=', 'int8ge', 'bool' ], [ 'int8', '<>', 'int8ne', 'bool' ],
		[ 'int8', '+', 'int8pl', 'int8' ], [ 'int8', '-', 'int8mi', 'int8' ],
		[ 'text', '=', 'texteq', 'bool' ], [ 'text', '<', 'text_lt', 'bool' ],
		[ 'text', '>', 'text_gt', 'bool' ], [ 'text', '||', 'textcat', 'text' ],
		[ 'timestamptz', '=', 'timestamptz_eq', 'bool' ], [ 'timestamptz', '<', 'timestamptz_lt', 'bool' ],
		[ 'timestamptz', '>', 'timestamptz_gt', 'bool' ], [ 'timestamptz', '<=', 'timestamptz_le', 'bool' ],
		[ 'timestamptz', '>=', 'timestamptz_ge', 'bool' ]);
	for my $o (@ops)
	{
		my ($type, $op, $fn, $ret) = @$o;
		$sql .= qq{
CREATE FUNCTION $s.evil_$fn(a $type, b $type) RETURNS $ret LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM $s.evil_hook('$op($type)'); RETURN pg_catalog.$fn(a, b); END \$f\$;
CREATE OPERATOR $s.$op (LEFTARG = $type, RIGHTARG = $type, FUNCTION = $s.evil_$fn);
};
	}
	$sql .= qq{
CREATE FUNCTION $s.now() RETURNS timestamptz LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM $s.evil_hook('now()'); RETURN pg_catalog.now(); END \$f\$;
CREATE FUNCTION $s.clock_timestamp() RETURNS timestamptz LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM $s.evil_hook('clock_timestamp()'); RETURN pg_catalog.clock_timestamp(); END \$f\$;
CREATE FUNCTION $s.unnest(a text[]) RETURNS SETOF text LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM $s.evil_hook('unnest(text[])'); RETURN QUERY SELECT pg_catalog.unnest(a); END \$f\$;
CREATE FUNCTION $s.unnest(a bigint[]) RETURNS SETOF bigint LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp AS \$f\$
BEGIN PERFORM $s.evil_hook('unnest(bigint[])'); RETURN QUERY SELECT pg_catalog.unnest(a); END \$f\$;
};
	return $sql;
}

# Install the toolkit as $role into $schema (created unless it exists), and
# check that it is live: a session of the attacker with the schema before
# pg_catalog resolves it.
sub sec_install_evil
{
	my ($node, %o) = @_;
	my $db = $o{dbname} // 'postgres';
	my ($ok, $out, $err) = try_psql($node,
		($o{schema} eq 'public' ? '' : "CREATE SCHEMA IF NOT EXISTS $o{schema};\n") . sec_evil_sql(%o),
		user => $o{role}, dbname => $db);
	ok($ok, "$o{tag}: $o{role} installs look-alike operators and functions in schema $o{schema}") or diag($err);
	($ok, $out, $err) = try_psql($node, qq{
SET search_path = $o{schema}, pg_catalog;
SELECT 1 = 1, now() IS NOT NULL;
SELECT count(*) > 0 FROM $o{schema}.evil_calls WHERE who = current_user;
DELETE FROM $o{schema}.evil_calls;}, user => $o{role}, dbname => $db);
	is((split /\n/, $out)[-1] // '', 't', "$o{tag}: the look-alikes are live for a search_path that puts $o{schema} first")
	  or diag("$out $err");
}

# The attacker did not gain anything: not superuser, no new role
# membership, no pwned_<tag> table, no hook called by another role.
sub sec_assert_no_escalation
{
	my ($node, %o) = @_;
	my ($r, $s, $t) = @o{qw(role schema tag)};
	my $db = $o{dbname} // 'postgres';
	my $name = $o{name} // $t;
	is(sec_val($node, qq{SELECT rolsuper FROM pg_roles WHERE rolname = '$r'}, dbname => $db),
		'f', "$name: $r is not a superuser");
	is( sec_val($node, qq{SELECT count(*) FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member
		WHERE r.rolname = '$r'}, dbname => $db),
		$o{memberships} // 0, "$name: $r was granted no role");
	is( sec_val($node, qq{SELECT coalesce(string_agg(c.oid::regclass::text || ' owned by '
		|| pg_get_userbyid(c.relowner), ', '), '') FROM pg_class c WHERE c.relname = 'pwned_$t'}, dbname => $db),
		'', "$name: no pwned_$t table was created");
	my $callers = sec_val($node, qq{SELECT coalesce(string_agg(who || ' called ' || what, ', ' ORDER BY who, what), '')
		FROM $s.evil_calls WHERE who <> '$r'}, dbname => $db);
	is($callers, '', "$name: no look-alike of $r ran as another role");
	return $callers;
}

# wait until pipeline $p has committed at least $n batches
sub sec_wait_batches
{
	my ($node, $p, $n, $timeout, %opt) = @_;
	return wait_for_value($node,
		sec_pin() . "SELECT coalesce(max(batches), 0) >= $n FROM streamguard.pipelines WHERE pipeline = '$p'",
		't', $timeout // 30, %opt);
}

1;
