package io.github.tandemtx.jta;

import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/**
 * Finds transaction control in SQL meant for a PostgreSQL branch: {@code
 * BEGIN}, {@code START TRANSACTION}, {@code COMMIT}, {@code END}, {@code
 * ABORT}, {@code ROLLBACK} (not {@code ROLLBACK TO SAVEPOINT}), {@code
 * PREPARE TRANSACTION}, {@code COMMIT PREPARED}, {@code ROLLBACK PREPARED}.
 * Sent on a branch, such a statement would end its transaction early: what
 * it wrote commits (or rolls back) on its own, and the branch's PREPARE
 * then prepares only what follows — a split.
 *
 * <p>The text is split at the semicolons outside string constants
 * ({@code '…'}, {@code E'…'} with backslash escapes), quoted identifiers,
 * dollar quotes ({@code $tag$…$tag$}) and comments ({@code --}, nested
 * <code>/* *&#47;</code>), as PostgreSQL splits a simple query; each
 * statement is judged by its first words. What a procedure or a DO block
 * runs is not seen, but PostgreSQL refuses transaction control there inside
 * a transaction block. The backend's transaction status, checked after
 * every statement, is the backstop ({@link PostgresBranch#statementRan}).
 */
final class PgTransactionControl {
    private PgTransactionControl() {
    }

    /** The first statement of sql, as written, that is transaction control, or null. */
    static String find(String sql) {
        for (String[] st : split(sql)) {
            if (controls(words(st[1]))) {
                return st[0];
            }
        }
        return null;
    }

    /** The refusal's message. */
    static String refusal(String rm, String stmt) {
        String s = stmt.strip();
        if (s.codePointCount(0, s.length()) > 80) {
            s = s.substring(0, s.offsetByCodePoints(0, 80)) + "…";
        }
        return "tandem: rm \"" + rm + "\": \"" + s + "\" is transaction control: not allowed inside a global transaction, whose"
                + " PostgreSQL branch it would end early (its writes committed or rolled back on their own); the transaction manager ends"
                + " the transaction (commit or rollback); savepoints are allowed";
    }

    private static boolean controls(List<String> w) {
        if (w.isEmpty()) {
            return false;
        }
        switch (w.get(0)) {
            case "BEGIN", "START", "COMMIT", "END", "ABORT":
                return true;
            case "ROLLBACK":
                int i = 1;
                if (i < w.size() && (w.get(i).equals("WORK") || w.get(i).equals("TRANSACTION"))) {
                    i++;
                }
                return i >= w.size() || !w.get(i).equals("TO");
            case "PREPARE":
                return w.size() > 1 && w.get(1).equals("TRANSACTION");
            default:
                return false;
        }
    }

    private static List<String> words(String code) {
        String up = code.toUpperCase(Locale.ROOT);
        List<String> out = new ArrayList<>();
        int start = -1;
        for (int i = 0; i <= up.length(); i++) {
            char c = i < up.length() ? up.charAt(i) : ' ';
            boolean word = c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '$' || c >= 0x80;
            if (word && start < 0) {
                start = i;
            } else if (!word && start >= 0) {
                out.add(up.substring(start, i));
                start = -1;
            }
        }
        return out;
    }

    /** The statements of q: {text as written, code with quoted text and comments blanked}. */
    private static List<String[]> split(String q) {
        List<String[]> out = new ArrayList<>();
        StringBuilder code = new StringBuilder();
        int start = 0;
        int n = q.length();
        for (int i = 0; i < n; i++) {
            char c = q.charAt(i);
            if (c == '\'') {
                boolean esc = i > 0 && (q.charAt(i - 1) == 'E' || q.charAt(i - 1) == 'e')
                        && (i < 2 || !isIdent(q.charAt(i - 2)));
                i++;
                while (i < n) {
                    char d = q.charAt(i);
                    if (esc && d == '\\') {
                        i += 2;
                        continue;
                    }
                    if (d == '\'') {
                        if (i + 1 < n && q.charAt(i + 1) == '\'') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i++;
                }
                code.append(' ');
            } else if (c == '"') {
                i++;
                while (i < n && !(q.charAt(i) == '"' && !(i + 1 < n && q.charAt(i + 1) == '"'))) {
                    i += q.charAt(i) == '"' ? 2 : 1;
                }
                code.append(' ');
            } else if (c == '$' && (i == 0 || !isIdent(q.charAt(i - 1))) && dollarTag(q, i) != null) {
                String tag = dollarTag(q, i);
                int end = q.indexOf(tag, i + tag.length());
                i = end < 0 ? n : end + tag.length() - 1;
                code.append(' ');
            } else if (q.startsWith("--", i)) {
                while (i + 1 < n && q.charAt(i + 1) != '\n') {
                    i++;
                }
                code.append(' ');
            } else if (q.startsWith("/*", i)) {
                int depth = 0;
                for (; i < n; i++) {
                    if (q.startsWith("/*", i)) {
                        depth++;
                        i++;
                    } else if (q.startsWith("*/", i)) {
                        depth--;
                        i++;
                        if (depth == 0) {
                            break;
                        }
                    }
                }
                code.append(' ');
            } else if (c == ';') {
                out.add(new String[] {q.substring(start, i), code.toString()});
                code.setLength(0);
                start = i + 1;
            } else {
                code.append(c);
            }
        }
        out.add(new String[] {q.substring(Math.min(start, n)), code.toString()});
        return out;
    }

    /** The dollar-quote opening at i ($$ or $tag$), or null ($1 is a parameter). */
    private static String dollarTag(String q, int i) {
        int j = i + 1;
        while (j < q.length() && (Character.isLetter(q.charAt(j)) || q.charAt(j) == '_' || j > i + 1 && Character.isDigit(q.charAt(j)))) {
            j++;
        }
        if (j < q.length() && q.charAt(j) == '$') {
            return q.substring(i, j + 1);
        }
        return null;
    }

    private static boolean isIdent(char c) {
        return Character.isLetterOrDigit(c) || c == '_' || c == '$';
    }
}
