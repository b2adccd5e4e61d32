package main

import (
	"fmt"
	"strings"
)

// Hostile statements: what an application may send on a transfer's MariaDB
// branch that ends (or tries to end) the transaction behind the SDK's back —
// transaction control, DDL, LOCK TABLES, compound statements MariaDB runs
// outside stored programs, executable comments, statements that run another
// one, a procedure that commits. With --hostile, a fraction of the transfers
// send one after their writes, ignore its error as a careless application
// would, and commit anyway: none may be acknowledged as committed (the SDK
// dooms a transaction whose branch failed a statement, and inside an XA
// branch MariaDB refuses each of them), and the checks must find both
// databases in agreement.

// hostileBase are the forms, with {junk} for a table and {proc} for a
// procedure that COMMITs, both made by setup. Each one, checked by hand on
// MariaDB 10.11, commits a plain transaction (or fails) and is refused inside
// an XA branch (XAER_RMFAIL); forms that end nothing there (SET autocommit = 1
// on a session already in autocommit, WHILE 0 DO …, PREPARE s FROM 'COMMIT'
// without EXECUTE) are left out, so that any acknowledged transfer that sent
// one of these is a failure.
var hostileBase = []string{
	"COMMIT",
	"COMMIT WORK",
	"BEGIN",
	"START TRANSACTION",
	"ROLLBACK",
	"CREATE TABLE IF NOT EXISTS {junk} (a int)",
	"DROP TABLE IF EXISTS {junk}_never",
	"TRUNCATE TABLE {junk}",
	"ALTER TABLE {junk} COMMENT = 'x'",
	"LOCK TABLES {junk} WRITE",
	"ANALYZE TABLE {junk}",
	"CREATE OR REPLACE VIEW {junk}_v AS SELECT 1 AS a",
	"RENAME TABLE {junk}_none TO {junk}_none2",
	"IF 1 THEN COMMIT; END IF",
	"BEGIN NOT ATOMIC COMMIT; END",
	"CASE WHEN 1 THEN COMMIT; ELSE BEGIN END; END CASE",
	"FOR i IN 1..1 DO COMMIT; END FOR",
	"REPEAT COMMIT; UNTIL 1 END REPEAT",
	"BEGIN NOT ATOMIC CREATE TABLE IF NOT EXISTS {junk} (a int); END",
	"EXECUTE IMMEDIATE 'COMMIT'",
	"SET STATEMENT max_statement_time = 100 FOR CREATE TABLE IF NOT EXISTS {junk} (a int)",
	"/*!50000 COMMIT */",
	"/*! COMMIT */",
	"/*M!100000 CREATE TABLE IF NOT EXISTS {junk} (a int) */",
	"CALL {proc}()",
	"XA END 'x'",
}

// hostileWrappers turn one form into another an application might send.
var hostileWrappers = []func(string) string{
	func(s string) string { return s },
	// Lower case, but for MariaDB's "/*M!" marker: "/*m!" is a plain
	// comment, and the statement in it would not run at all.
	func(s string) string { return strings.ReplaceAll(strings.ToLower(s), "/*m!", "/*M!") },
	func(s string) string { return "/* app */ " + s },
	func(s string) string { return "SELECT 1; " + s },
	func(s string) string { return s + " -- trailing" },
	func(s string) string { return "\n\t" + s + ";" },
}

// hostileStatements generates every wrapped form for prefix's tables.
func hostileStatements(prefix string) []string {
	r := strings.NewReplacer("{junk}", prefix+"hostile_junk", "{proc}", prefix+"hostile_commit")
	var out []string
	for _, b := range hostileBase {
		for _, w := range hostileWrappers {
			out = append(out, w(r.Replace(b)))
		}
	}
	return out
}

// hostileSetup is what the hostile statements need on MariaDB.
func hostileSetup(prefix string) []string {
	return []string{
		"CREATE TABLE IF NOT EXISTS " + prefix + "hostile_junk (a int) ENGINE=InnoDB COMMENT='" + demoMark + "'",
		"CREATE OR REPLACE PROCEDURE " + prefix + "hostile_commit() COMMIT",
	}
}

func describeHostile(n int) string {
	return fmt.Sprintf("%d forms of statements that end a transaction (transaction control, DDL, LOCK TABLES, compound statements, executable comments, a committing procedure)", n)
}
