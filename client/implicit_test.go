package client

import "testing"

func TestEndsTransaction(t *testing.T) {
	for _, tc := range []struct {
		q    string
		ends bool
	}{
		{"INSERT INTO t VALUES (1)", false},
		{"UPDATE t SET v = ';COMMIT' WHERE id = 1", false},
		{"SELECT 1 -- COMMIT", false},
		{"ROLLBACK TO SAVEPOINT a", false},
		{"SAVEPOINT a", false},
		{"SET @x = 1", false},
		{"  /* c */ CREATE TABLE x (a int)", true},
		{"INSERT INTO t VALUES (1); COMMIT", true},
		{"insert into t values (1);\n-- next\ndrop table t", true},
		{"LOCK TABLES t WRITE", true},
		{"START TRANSACTION", true},
		{"begin", true},
		{"ROLLBACK", true},
		{"SET autocommit = 1", true},
		{"SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", true},
		{"TRUNCATE t", true},
		{"XA END 'x'", true},
	} {
		if got := endsTransaction(tc.q) != ""; got != tc.ends {
			t.Errorf("endsTransaction(%q) = %v, want %v", tc.q, got, tc.ends)
		}
	}
}
