package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The statements a MariaDB/MySQL commit point refuses: the cases of the Go
 * SDK's client/implicit_test.go, which must agree with these.
 */
class ImplicitCommitTest {
    private static final Object[][] CASES = {
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
        // A stored procedure may COMMIT (it does commit a plain transaction).
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
        {"SELECT 'a\\'; COMMIT; SELECT '1'", true},
        {"SELECT 'it\\'s', 'x'", false},
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
    };

    @Test
    void endsTransaction() {
        List<String> wrong = new ArrayList<>();
        for (Object[] c : CASES) {
            String sql = (String) c[0];
            boolean want = (Boolean) c[1];
            boolean got = ImplicitCommit.endsTransaction(sql) != null;
            if (got != want) {
                wrong.add("endsTransaction(" + sql + ") = " + got + ", want " + want);
            }
        }
        assertTrue(wrong.isEmpty(), String.join("\n", wrong));
    }

    @Test
    void returnsTheStatementAsWritten() {
        assertEquals(" /*! DROP TABLE x */",
                ImplicitCommit.endsTransaction("INSERT INTO t VALUES (1); /*! DROP TABLE x */; SELECT 1"));
    }

    private static final String TAIL = " would end the transaction (an implicit commit): not allowed inside a global transaction,"
            + " whose MariaDB/MySQL branch is its commit point;"
            + " run DDL, LOCK TABLES, transaction control and stored procedures (CALL: one may COMMIT) outside it, or decide at the coordinator (an XA branch refuses them too)";

    /** The strings of Go's TestRefusal. */
    @Test
    void refusal() {
        assertEquals("tandem: rm \"maria\": \"COMMIT\"" + TAIL, ImplicitCommit.refusal("maria", " COMMIT\n"));
        assertEquals("tandem: rm \"maria\": \"DROP TABLE \\\"x\\\"\\t-- é\\\\\"" + TAIL,
                ImplicitCommit.refusal("maria", "DROP TABLE \"x\"\t-- é\\"));
        assertEquals("tandem: rm \"maria\": \"CREATE TABLE t (" + "é".repeat(64) + "…\"" + TAIL,
                ImplicitCommit.refusal("maria", "CREATE TABLE t (" + "é".repeat(80) + ")"));
        assertEquals("tandem: rm \"maria\": \"DROP TABLE " + "é".repeat(69) + "\"" + TAIL,
                ImplicitCommit.refusal("maria", "DROP TABLE " + "é".repeat(69)));
        assertEquals("tandem: rm \"maria\": \"DROP TABLE " + "é".repeat(69) + "…\"" + TAIL,
                ImplicitCommit.refusal("maria", "DROP TABLE " + "é".repeat(70)));
    }
}
