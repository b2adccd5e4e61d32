package client

import (
	"strings"
	"testing"
)

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
		// A stored procedure may COMMIT (it does commit a plain transaction;
		// an XA branch refuses it): not allowed on the commit point.
		{"CALL transfer(1, 2)", true},
		{"call p", true},
		{"SELECT \"a;COMMIT\", `b;DROP`", false},
		// Executable comments are executed by MariaDB/MySQL, version-gated
		// or not: their content is the statement.
		{"/*!50000 CREATE TABLE t (a int) */", true},
		{"/*! COMMIT */", true},
		{"/*M! COMMIT */", true},
		{"/*M!100000 DROP TABLE x */", true},
		{"/*!50000CREATE TABLE t (a int)*/", true},
		{"/*!COMMIT*/", true},
		{"INSERT INTO t VALUES (1); /*! DROP TABLE x */", true},
		{"SELECT 1 /*! ; COMMIT */", true},
		{"/* c */ /*!40101 SET autocommit = 0 */", true},
		{"/*!99999 COMMIT */", true}, // not run by an older server: refused anyway
		{"INSERT /*! IGNORE */ INTO t VALUES (1)", false},
		{"/*!40101 SET NAMES utf8mb4 */", false},
		{"SELECT 1 /* ; COMMIT */", false},
		{"SELECT 1 # ; COMMIT", false},
		// A word ends at a comment; "--" starts a comment only before a
		// blank or a control character.
		{"COMMIT/* c */", true},
		{"DROP/**/TABLE x", true},
		{"INSERT INTO t VALUES (1--1); COMMIT", true},
		{"SELECT 1 --\tx\n", false},
		// Under sql_mode NO_BACKSLASH_ESCAPES a backslash ends no quote.
		{`SELECT 'a\'; COMMIT; SELECT '1'`, true},
		{`SELECT 'it\'s', 'x'`, false},
		// Statements that run another one.
		{"SET STATEMENT max_statement_time=100 FOR CREATE TABLE x (a int)", true},
		{"SET STATEMENT max_statement_time=100 FOR SELECT 1", false},
		{"EXECUTE IMMEDIATE 'COMMIT'", true},
		{"PREPARE s FROM 'COMMIT'", true},
		{"SET @a = 1, autocommit = 0", true},
		{"SET @@session.autocommit = 0", true},
		{"SET @a = 'start transaction'", false},
		{"ROLLBACK WORK TO SAVEPOINT a", false},
		{"ROLLBACK WORK", true},
	} {
		if got := endsTransaction(tc.q) != ""; got != tc.ends {
			t.Errorf("endsTransaction(%q) = %v, want %v", tc.q, got, tc.ends)
		}
	}
}

// The statement found is returned as written.
func TestEndsTransactionReturnsTheStatement(t *testing.T) {
	if got, want := endsTransaction("INSERT INTO t VALUES (1); /*! DROP TABLE x */; SELECT 1"), " /*! DROP TABLE x */"; got != want {
		t.Errorf("endsTransaction = %q, want %q", got, want)
	}
}

// The message quotes the statement as Go does, cut after 80 characters (the
// Java client's ImplicitCommitTest expects the same strings).
func TestRefusal(t *testing.T) {
	const tail = " would end the transaction (an implicit commit): not allowed inside a global transaction, whose MariaDB/MySQL branch is its commit point; " +
		"run DDL, LOCK TABLES, transaction control and stored procedures (CALL: one may COMMIT) outside it, or decide at the coordinator (an XA branch refuses them too)"
	for _, tc := range []struct{ stmt, want string }{
		{" COMMIT\n", `client: rm "maria": "COMMIT"` + tail},
		{"DROP TABLE \"x\"\t-- é\\", `client: rm "maria": "DROP TABLE \"x\"\t-- é\\"` + tail},
		{"CREATE TABLE t (" + strings.Repeat("é", 80) + ")", `client: rm "maria": "CREATE TABLE t (` + strings.Repeat("é", 64) + `…"` + tail},
		{"DROP TABLE " + strings.Repeat("é", 69), `client: rm "maria": "DROP TABLE ` + strings.Repeat("é", 69) + `"` + tail},
		{"DROP TABLE " + strings.Repeat("é", 70), `client: rm "maria": "DROP TABLE ` + strings.Repeat("é", 69) + `…"` + tail},
	} {
		if got := refusal("maria", tc.stmt).Error(); got != tc.want {
			t.Errorf("refusal(%q) =\n%s\nwant\n%s", tc.stmt, got, tc.want)
		}
	}
}
