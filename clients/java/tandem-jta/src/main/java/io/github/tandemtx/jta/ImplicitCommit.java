package io.github.tandemtx.jta;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Set;

/**
 * Finds the statements that would end a MariaDB/MySQL transaction: the Go
 * SDK's {@code client/implicit.go}, ported rule for rule, so that both
 * clients refuse the same SQL with the same message.
 *
 * <p>A commit point on MariaDB/MySQL is an XA branch, inside which the
 * server itself refuses every statement that would end the transaction
 * (XAER_RMFAIL): this check is only an earlier, clearer error, sent before
 * the statement. Its cases are the corpus api/testdata/implicit-commit.txt,
 * which the Go and Java tests both read.
 *
 * <p>The check errs on the side of refusing: it reads quotes both with and
 * without backslash escapes (sql_mode {@code NO_BACKSLASH_ESCAPES}), takes
 * the content of every executable comment (<code>/*! ... *&#47;</code>,
 * <code>/*!50700 ... *&#47;</code>, <code>/*M! ... *&#47;</code>,
 * <code>/*M!100500 ... *&#47;</code>) for code whatever its version number,
 * and refuses {@code PREPARE} and {@code EXECUTE}, whose statement it cannot
 * see. It does not see into stored procedures ({@code CALL}) or triggers.
 */
final class ImplicitCommit {
    /**
     * The first keywords of the statements that end the transaction
     * (MariaDB's "Statements That Cause an Implicit Commit"), that control it,
     * or that run a statement this check cannot see.
     */
    private static final Set<String> KEYWORDS = Set.of(
            "ALTER", "CREATE", "DROP", "RENAME", "TRUNCATE",
            "LOCK", "UNLOCK", "BEGIN", "START", "COMMIT",
            "GRANT", "REVOKE", "FLUSH", "ANALYZE", "OPTIMIZE",
            "REPAIR", "CACHE", "CHECK", "INSTALL", "UNINSTALL",
            "RESET", "PURGE", "CHANGE", "XA", "LOAD",
            "PREPARE", "EXECUTE", "CALL",
            // Compound statements, which MariaDB runs outside stored programs: the
            // statements in their body (past the semicolons inside) are not seen
            // by a first-word check, so the compound statement is refused whole.
            "IF", "CASE", "WHILE", "LOOP", "REPEAT", "FOR", "DECLARE");

    /** The label before a compound statement ("l: LOOP …"). */
    private static final java.util.regex.Pattern LABEL = java.util.regex.Pattern.compile("^\\s*[A-Za-z0-9_$]+\\s*:");

    private ImplicitCommit() {}

    /**
     * Returns the first statement of {@code sql} (several may be joined by
     * ';'), as written, that would end or control a MariaDB/MySQL
     * transaction, or null when none does. {@code ROLLBACK [WORK] TO
     * SAVEPOINT} and {@code SET} are allowed, but not a {@code SET} that
     * names autocommit or {@code TRANSACTION}; {@code SET STATEMENT ... FOR}
     * is judged by its statement. Comments ({@code #}, {@code -- } and
     * <code>/* *&#47;</code>) and quoted text are skipped, except the content
     * of executable comments, which the server runs.
     */
    static String endsTransaction(String sql) {
        for (boolean backslash : new boolean[] {true, false}) {
            for (Statement st : split(sql, backslash)) {
                if (endsTx(words(LABEL.matcher(st.code()).replaceAll("")), 0)) {
                    return st.text();
                }
            }
        }
        return null;
    }

    /**
     * The message refusing {@code stmt} on the resource manager {@code rm},
     * as the Go SDK words it: the statement is quoted as Go's {@code %q}
     * does, without its surrounding blanks, cut after 80 characters with
     * "…".
     */
    static String refusal(String rm, String stmt) {
        String s = trimSpace(stmt);
        if (s.codePointCount(0, s.length()) > 80) {
            s = s.substring(0, s.offsetByCodePoints(0, 80)) + "…";
        }
        return "tandem: rm " + goQuote(rm) + ": " + goQuote(s)
                + " would end the transaction (an implicit commit): not allowed inside a global transaction,"
                + " whose MariaDB/MySQL branch is its commit point;"
                + " run DDL, LOCK TABLES, transaction control and stored procedures (CALL: one may COMMIT) outside it, or decide at the coordinator (an XA branch refuses them too)";
    }

    /** Whether the statement whose upper-case words start at w[i] would end or control the transaction. */
    private static boolean endsTx(List<String> w, int i) {
        if (i >= w.size()) {
            return false;
        }
        switch (w.get(i)) {
            case "ROLLBACK":
                i++;
                if (i < w.size() && w.get(i).equals("WORK")) {
                    i++;
                }
                return i >= w.size() || !w.get(i).equals("TO");
            case "SET":
                for (int j = i; j < w.size(); j++) {
                    String x = w.get(j);
                    if (x.equals("FOR") && w.get(i + 1).equals("STATEMENT")) {
                        return endsTx(w, j + 1);
                    }
                    if (x.equals("TRANSACTION") || x.contains("AUTOCOMMIT")) {
                        return true;
                    }
                }
                return false;
            default:
                return KEYWORDS.contains(w.get(i));
        }
    }

    /**
     * The upper-case words of a statement's code: runs of letters, digits,
     * '_', '$', '@', '.' and non-ASCII characters.
     */
    private static List<String> words(String code) {
        String up = code.toUpperCase(Locale.ROOT);
        List<String> out = new ArrayList<>();
        int start = -1;
        for (int i = 0; i <= up.length(); i++) {
            boolean word = i < up.length() && isWordChar(up.charAt(i));
            if (word && start < 0) {
                start = i;
            } else if (!word && start >= 0) {
                out.add(up.substring(start, i));
                start = -1;
            }
        }
        return out;
    }

    private static boolean isWordChar(char c) {
        return c >= 0x80 || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || "_$@.".indexOf(c) >= 0;
    }

    /**
     * One statement of a query: its text, and its code, the text with
     * comments, quote characters, the content of '...' strings and the
     * markers of executable comments blanked out.
     */
    private record Statement(String text, String code) {}

    /**
     * Splits {@code q} at the semicolons outside quotes and comments, as
     * MariaDB/MySQL do. "--" starts a comment only before a blank, a control
     * character or the end; "/*!", "/*M!" and their version number, and
     * "*&#47;" outside a comment, are markers, whose comment's content is
     * code. {@code backslash} says whether a backslash escapes the next
     * character in quotes.
     */
    private static List<Statement> split(String q, boolean backslash) {
        List<Statement> out = new ArrayList<>();
        StringBuilder code = new StringBuilder();
        int start = 0;
        char quote = 0;
        for (int i = 0; i < q.length(); i++) {
            char c = q.charAt(i);
            if (quote != 0) {
                if (c == quote) {
                    quote = 0;
                    c = ' ';
                } else if (c == '\\' && backslash && quote != '`') {
                    i++;
                }
                if (quote == '\'') {
                    c = ' ';
                }
            } else if (c == '\'' || c == '"' || c == '`') {
                quote = c;
                c = ' ';
            } else if (c == '#' || q.startsWith("--", i) && (i + 2 == q.length() || q.charAt(i + 2) <= ' ')) {
                while (i + 1 < q.length() && q.charAt(i + 1) != '\n') {
                    i++;
                }
                c = ' ';
            } else if (q.startsWith("/*!", i) || q.startsWith("/*M!", i)) {
                i = q.indexOf('!', i);
                while (i + 1 < q.length() && q.charAt(i + 1) >= '0' && q.charAt(i + 1) <= '9') {
                    i++;
                }
                c = ' ';
            } else if (q.startsWith("/*", i)) {
                int end = q.indexOf("*/", i + 2);
                i = end < 0 ? q.length() : end + 1;
                c = ' ';
            } else if (q.startsWith("*/", i)) {
                i++;
                c = ' ';
            } else if (c == ';') {
                out.add(new Statement(q.substring(start, i), code.toString()));
                code.setLength(0);
                start = i + 1;
                continue;
            }
            code.append(c);
        }
        out.add(new Statement(q.substring(start), code.toString()));
        return out;
    }

    /** {@code s} without the leading and trailing white space of Go's unicode.IsSpace. */
    private static String trimSpace(String s) {
        int b = 0;
        int e = s.length();
        while (b < e && isGoSpace(s.codePointAt(b))) {
            b += Character.charCount(s.codePointAt(b));
        }
        while (e > b && isGoSpace(s.codePointBefore(e))) {
            e -= Character.charCount(s.codePointBefore(e));
        }
        return s.substring(b, e);
    }

    private static boolean isGoSpace(int cp) {
        return cp >= '\t' && cp <= '\r' || cp == ' ' || cp == 0x85 || cp == 0xA0 || cp == 0x1680
                || cp >= 0x2000 && cp <= 0x200A || cp == 0x2028 || cp == 0x2029 || cp == 0x202F
                || cp == 0x205F || cp == 0x3000;
    }

    /** {@code s} as Go's strconv.Quote (the {@code %q} verb) writes it. */
    private static String goQuote(String s) {
        StringBuilder b = new StringBuilder("\"");
        s.codePoints().forEach(cp -> {
            switch (cp) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case 0x07 -> b.append("\\a");
                case '\b' -> b.append("\\b");
                case '\f' -> b.append("\\f");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                case 0x0B -> b.append("\\v");
                default -> {
                    if (isGoPrint(cp)) {
                        b.appendCodePoint(cp);
                    } else if (cp < ' ' || cp == 0x7F) {
                        b.append(String.format("\\x%02x", cp));
                    } else if (cp < 0x10000) {
                        b.append(String.format("\\u%04x", cp));
                    } else {
                        b.append(String.format("\\U%08x", cp));
                    }
                }
            }
        });
        return b.append('"').toString();
    }

    /** Go's strconv.IsPrint: letters, marks, numbers, punctuation, symbols and the ASCII space. */
    private static boolean isGoPrint(int cp) {
        if (cp == ' ') {
            return true;
        }
        switch (Character.getType(cp)) {
            case Character.SPACE_SEPARATOR, Character.LINE_SEPARATOR, Character.PARAGRAPH_SEPARATOR,
                    Character.CONTROL, Character.FORMAT, Character.PRIVATE_USE, Character.SURROGATE,
                    Character.UNASSIGNED:
                return false;
            default:
                return true;
        }
    }
}
