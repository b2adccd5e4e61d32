package client

import "testing"

// Transaction control is found in any position of a multi-statement
// string, never inside quotes, dollar quotes or comments.
func TestPgTransactionControl(t *testing.T) {
	for _, tc := range []struct {
		q    string
		ends bool
	}{
		{"COMMIT", true},
		{"  end ;", true},
		{"end transaction", true},
		{"ABORT", true},
		{"INSERT INTO t VALUES (1); COMMIT", true},
		{"SELECT 1; commit work", true},
		{"ROLLBACK", true},
		{"ROLLBACK; INSERT INTO t VALUES (1)", true},
		{"ROLLBACK PREPARED 'x'", true},
		{"COMMIT PREPARED 'x'", true},
		{"COMMIT AND CHAIN", true},
		{"/* x */ BEGIN", true},
		{"/* a /* nested */ still a comment */ BEGIN", true},
		{"START TRANSACTION", true},
		{"PREPARE TRANSACTION 'x'", true},
		{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", true},
		{"SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY", true},
		{"SELECT 'it''s'; COMMIT", true},
		{`SELECT E'a\'; COMMIT; SELECT '`, true}, // refused: one reading finds COMMIT
		{"SELECT $$ a $$; END", true},
		{"SELECT 1 -- x\n; COMMIT", true},
		{"ROLLBACK TO SAVEPOINT a", false},
		{"rollback work to a", false},
		{"ROLLBACK TRANSACTION TO SAVEPOINT a", false},
		{"SAVEPOINT a", false},
		{"RELEASE SAVEPOINT a", false},
		{"PREPARE s AS SELECT 1", false},
		{"SET LOCAL lock_timeout = 1", false},
		{"SELECT 'COMMIT; END'", false},
		{`SELECT "commit"`, false},
		{"SELECT $$ ; COMMIT $$", false},
		{"SELECT $tag$ ; COMMIT $x$ ; $tag$", false},
		{"DO $body$ BEGIN PERFORM 1; END $body$", false},
		{"SELECT 1 /* ; COMMIT */", false},
		{"SELECT 1 -- ; COMMIT", false},
		{"SELECT $1::int", false},
		{"UPDATE t SET v = 1 WHERE id = $1", false},
		{"INSERT INTO t (begin_at) VALUES (now())", false},
	} {
		if got := pgTransactionControl(tc.q) != ""; got != tc.ends {
			t.Errorf("pgTransactionControl(%q) = %v, want %v", tc.q, got, tc.ends)
		}
	}
}
