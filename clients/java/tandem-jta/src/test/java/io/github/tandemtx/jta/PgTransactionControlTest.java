package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The transaction control a PostgreSQL branch refuses before sending it. */
class PgTransactionControlTest {
    private static final Object[][] CASES = {
        {"COMMIT", true},
        {"commit work", true},
        {"END", true},
        {"ABORT", true},
        {"BEGIN", true},
        {"START TRANSACTION ISOLATION LEVEL SERIALIZABLE", true},
        {"ROLLBACK", true},
        {"ROLLBACK AND CHAIN", true},
        {"ROLLBACK PREPARED 'x'", true},
        {"COMMIT PREPARED 'x'", true},
        {"PREPARE TRANSACTION 'x'", true},
        {"INSERT INTO t VALUES (1); COMMIT", true},
        {"  /* a /* nested */ comment */ COMMIT", true},
        {"SELECT 1 -- x\n; END", true},
        {"SELECT $$;$$; COMMIT", true},
        {"SELECT E'\\';'; COMMIT", true},
        {"ROLLBACK TO SAVEPOINT a", false},
        {"ROLLBACK WORK TO a", false},
        {"ROLLBACK TRANSACTION TO SAVEPOINT a", false},
        {"SAVEPOINT a", false},
        {"RELEASE SAVEPOINT a", false},
        {"PREPARE q AS SELECT 1", false},
        {"SELECT 'COMMIT'", false},
        {"SELECT 1; -- COMMIT", false},
        {"SELECT 1 /* ; COMMIT */", false},
        {"SELECT \"end\" FROM t", false},
        {"SELECT $tag$ ; COMMIT $tag$", false},
        {"SELECT 'a'';COMMIT'", false},
        {"SELECT $1::int; SELECT 2", false},
        {"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", false},
        {"UPDATE t SET v = 1 WHERE id = 1 RETURNING v", false},
    };

    @Test
    void find() {
        List<String> wrong = new ArrayList<>();
        for (Object[] c : CASES) {
            boolean got = PgTransactionControl.find((String) c[0]) != null;
            if (got != (Boolean) c[1]) {
                wrong.add("find(" + c[0] + ") = " + got + ", want " + c[1]);
            }
        }
        assertTrue(wrong.isEmpty(), String.join("\n", wrong));
        assertEquals(" COMMIT", PgTransactionControl.find("INSERT INTO t VALUES (1); COMMIT; SELECT 1"), "the statement as written");
    }
}
