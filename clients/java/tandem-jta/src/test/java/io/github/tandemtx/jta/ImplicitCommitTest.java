package io.github.tandemtx.jta;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The statements a MariaDB/MySQL commit point refuses early: the corpus
 * api/testdata/implicit-commit.txt, which the Go SDK's client/implicit_test.go
 * reads too, so both refuse the same SQL.
 */
class ImplicitCommitTest {
    /** One case of the corpus: a statement, and whether it ends (or may end) the transaction. */
    record Case(String sql, boolean ends) {
    }

    /**
     * Reads the corpus: "ends STMT" or "keeps STMT" per line (the statement
     * is everything after the first space), with \n, \t and \\ escapes;
     * lines starting with # are comments.
     */
    static List<Case> corpus() throws IOException {
        // Surefire runs in clients/java/tandem-jta: the repository is three levels up.
        Path file = Path.of("").toAbsolutePath().getParent().getParent().getParent().resolve("api/testdata/implicit-commit.txt");
        List<Case> out = new ArrayList<>();
        List<String> lines = Files.readAllLines(file, StandardCharsets.UTF_8);
        for (int i = 0; i < lines.size(); i++) {
            String line = lines.get(i);
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            int sp = line.indexOf(' ');
            String verb = sp < 0 ? line : line.substring(0, sp);
            if (sp < 0 || !verb.equals("ends") && !verb.equals("keeps")) {
                throw new IllegalStateException(file + ":" + (i + 1) + ": want \"ends STMT\" or \"keeps STMT\", got \"" + line + "\"");
            }
            out.add(new Case(unescape(line.substring(sp + 1)), verb.equals("ends")));
        }
        return out;
    }

    /** Go's strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\t`, "\t"): left to right, no rescanning. */
    private static String unescape(String s) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '\\' && i + 1 < s.length()) {
                char n = s.charAt(i + 1);
                if (n == '\\' || n == 'n' || n == 't') {
                    b.append(n == 'n' ? '\n' : n == 't' ? '\t' : '\\');
                    i++;
                    continue;
                }
            }
            b.append(c);
        }
        return b.toString();
    }

    @Test
    void endsTransaction() throws IOException {
        List<Case> cases = corpus();
        assertTrue(cases.size() >= 40, "the corpus has " + cases.size() + " cases: read the wrong file?");
        List<String> wrong = new ArrayList<>();
        for (Case c : cases) {
            boolean got = ImplicitCommit.endsTransaction(c.sql()) != null;
            if (got != c.ends()) {
                wrong.add("endsTransaction(" + c.sql() + ") = " + got + ", want " + c.ends());
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
