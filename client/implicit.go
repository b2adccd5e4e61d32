package client

import (
	"fmt"
	"regexp"
	"strings"
)

// A commit point on MySQL/MariaDB is an XA branch (commit_point.go): inside
// it the server itself refuses every statement that would end the
// transaction implicitly (DDL, LOCK TABLES, BEGIN, COMMIT, compound
// statements that run one, …) with XAER_RMFAIL, which dooms the
// transaction. This classifier is only an earlier, clearer error: it
// refuses such a statement before it is sent, naming it. The cases are one
// corpus shared with the Java client (api/testdata/implicit-commit.txt).

// implicitCommit lists the first keywords of MySQL/MariaDB statements that
// end the transaction (MariaDB's "Statements That Cause an Implicit
// Commit"), that control it, or that run statements the SDK cannot see
// (PREPARE, EXECUTE, EXECUTE IMMEDIATE, and CALL: a stored procedure may
// COMMIT, which ends a plain transaction; an XA branch refuses it).
var implicitCommit = map[string]bool{
	"ALTER": true, "CREATE": true, "DROP": true, "RENAME": true, "TRUNCATE": true,
	"LOCK": true, "UNLOCK": true, "BEGIN": true, "START": true, "COMMIT": true,
	"GRANT": true, "REVOKE": true, "FLUSH": true, "ANALYZE": true, "OPTIMIZE": true,
	"REPAIR": true, "CACHE": true, "CHECK": true, "INSTALL": true, "UNINSTALL": true,
	"RESET": true, "PURGE": true, "CHANGE": true, "XA": true, "LOAD": true,
	"PREPARE": true, "EXECUTE": true, "CALL": true,
	// Compound statements, which MariaDB runs outside stored programs: the
	// statements in their body (past the semicolons inside) are not seen
	// by a first-word check, so the compound statement is refused whole.
	"IF": true, "CASE": true, "WHILE": true, "LOOP": true, "REPEAT": true, "FOR": true, "DECLARE": true,
}

// label matches the label before a compound statement ("l: LOOP …").
var label = regexp.MustCompile(`^\s*[A-Za-z0-9_$]+\s*:`)

// endsTransaction returns the first statement of query (several may be
// joined by ';') that would end or control a MySQL/MariaDB transaction, or
// "" when none does. ROLLBACK [WORK] TO SAVEPOINT and SET are allowed, but
// not a SET that names autocommit or TRANSACTION, and SET STATEMENT … FOR
// is judged by its statement. The content of an executable comment
// ("/*! … */", "/*!50700 … */", "/*M! … */", "/*M!100500 … */") is code:
// the server runs it, whatever its version number. The query is read both
// with and without backslash escapes in quotes (sql_mode
// NO_BACKSLASH_ESCAPES), and refused if either reading finds a statement.
// The check errs on the side of refusing.
func endsTransaction(query string) string {
	for _, backslash := range []bool{true, false} {
		for _, st := range splitStatements(query, backslash) {
			if endsTx(words(label.ReplaceAllString(st.code, ""))) {
				return st.text
			}
		}
	}
	return ""
}

// endsTx says whether a statement of these words (upper case) would end or
// control the transaction.
func endsTx(w []string) bool {
	if len(w) == 0 {
		return false
	}
	switch w[0] {
	case "ROLLBACK":
		w = w[1:]
		if len(w) > 0 && w[0] == "WORK" {
			w = w[1:]
		}
		return len(w) == 0 || w[0] != "TO"
	case "SET":
		for i, x := range w {
			switch {
			case x == "FOR" && w[1] == "STATEMENT":
				return endsTx(w[i+1:])
			case x == "TRANSACTION" || strings.Contains(x, "AUTOCOMMIT"):
				return true
			}
		}
		return false
	}
	return implicitCommit[w[0]]
}

// words splits a statement's code into upper-case words: runs of letters,
// digits, '_', '$', '@', '.' and non-ASCII characters.
func words(code string) []string {
	return strings.FieldsFunc(strings.ToUpper(code), func(r rune) bool {
		return r < 0x80 && !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_$@.", r))
	})
}

// refuseImplicitCommit is the error for such a statement on a commit point.
func (b *Branch) refuseImplicitCommit(query string) error {
	stmt := endsTransaction(query)
	if stmt == "" {
		return nil
	}
	return refusal(b.rm.name, stmt)
}

// refusal is the error refusing stmt on rm: it quotes stmt without its
// surrounding blanks, cut after 80 characters with "…".
func refusal(rm, stmt string) error {
	return fmt.Errorf("client: rm %q: %q would end the transaction (an implicit commit): not allowed inside a global transaction, whose MariaDB/MySQL branch is its commit point; "+
		"run DDL, LOCK TABLES, transaction control and stored procedures (CALL: one may COMMIT) outside it, or decide at the coordinator (an XA branch refuses them too)", rm, clipStmt(stmt))
}

// statement is one statement of a query: its text, and its code, the text
// with comments, quote characters, the content of '…' strings and the
// markers of executable comments blanked out.
type statement struct{ text, code string }

// splitStatements splits query at the semicolons outside quotes and
// comments, as MariaDB/MySQL do. "--" starts a comment only before a blank,
// a control character or the end; "/*!", "/*M!" and their version number,
// and "*/" outside a comment, are markers, whose comment's content is code.
// backslash says whether a backslash escapes the next character in quotes.
func splitStatements(query string, backslash bool) []statement {
	var out []statement
	var code strings.Builder
	start := 0
	var quote byte
	for i := 0; i < len(query); i++ {
		c := query[i]
		rest := query[i:]
		switch {
		case quote != 0:
			switch {
			case c == quote:
				quote, c = 0, ' '
			case c == '\\' && backslash && quote != '`':
				i++
			}
			if quote == '\'' {
				c = ' '
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
			c = ' '
		case c == '#' || strings.HasPrefix(rest, "--") && (len(rest) == 2 || rest[2] <= ' '):
			for i+1 < len(query) && query[i+1] != '\n' {
				i++
			}
			c = ' '
		case strings.HasPrefix(rest, "/*!") || strings.HasPrefix(rest, "/*M!"):
			i += strings.IndexByte(rest, '!')
			for i+1 < len(query) && query[i+1] >= '0' && query[i+1] <= '9' {
				i++
			}
			c = ' '
		case strings.HasPrefix(rest, "/*"):
			end := strings.Index(rest[2:], "*/")
			if end < 0 {
				i = len(query)
			} else {
				i += end + 3
			}
			c = ' '
		case strings.HasPrefix(rest, "*/"):
			i++
			c = ' '
		case c == ';':
			out = append(out, statement{query[start:i], code.String()})
			code.Reset()
			start = i + 1
			continue
		}
		code.WriteByte(c)
	}
	return append(out, statement{query[start:], code.String()})
}
