package client

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/internal/testhook"
)

// A PostgreSQL branch is a plain transaction until PREPARE TRANSACTION (or
// the commit point's decision). Transaction-control text sent on it —
// COMMIT, END, ABORT, ROLLBACK, BEGIN, PREPARE TRANSACTION, … — would end
// it before the decision: its writes committed (or rolled back, and the
// statements after it autocommitted), and PREPARE then answers ROLLBACK
// while the other branches are rolled back: a split. PostgreSQL itself
// refuses a COMMIT run by a procedure or a DO block inside a transaction
// block, so the text is the way in. Two guards:
//
//   - before a statement is sent, its text is refused if any of its
//     statements controls the transaction (pgTransactionControl);
//   - after every statement, and before every statement and the commit,
//     the backend's transaction status (from its ReadyForQuery message,
//     read through pgx at no round trip) must be "in a transaction block"
//     ('T'): idle ('I') or failed ('E') dooms the transaction, and nothing
//     more is sent on the branch (pgStatus).

// pgTransactionControl returns the first statement of query that would
// end or control a PostgreSQL transaction, or "" when none does. ROLLBACK
// [WORK | TRANSACTION] TO [SAVEPOINT] is allowed. The query is read both
// with and without backslash escapes in quotes (E'…' strings, or
// standard_conforming_strings off), and refused if either reading finds a
// statement: the check errs on the side of refusing.
func pgTransactionControl(query string) string {
	for _, backslash := range []bool{false, true} {
		for _, st := range splitPostgres(query, backslash) {
			if pgEndsTx(pgWords(st.code)) {
				return st.text
			}
		}
	}
	return ""
}

// pgEndsTx says whether a statement of these words (upper case) would end
// or control the transaction.
func pgEndsTx(w []string) bool {
	if len(w) == 0 {
		return false
	}
	next := func(i int) string {
		if i < len(w) {
			return w[i]
		}
		return ""
	}
	switch w[0] {
	case "COMMIT", "END", "ABORT", "BEGIN", "START":
		return true
	case "ROLLBACK":
		i := 1
		if next(i) == "WORK" || next(i) == "TRANSACTION" {
			i++
		}
		return next(i) != "TO"
	case "PREPARE":
		return next(1) == "TRANSACTION"
	case "SET":
		i := 1
		if next(i) == "SESSION" || next(i) == "LOCAL" {
			i++
		}
		return next(i) == "TRANSACTION" || next(i) == "CHARACTERISTICS"
	}
	return false
}

// pgWords splits a statement's code into upper-case words: runs of
// letters, digits, '_', '$' and non-ASCII characters.
func pgWords(code string) []string {
	return strings.FieldsFunc(strings.ToUpper(code), func(r rune) bool {
		return r < 0x80 && !(r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '$')
	})
}

// splitPostgres splits query at the semicolons outside quotes, dollar
// quotes and comments, as PostgreSQL's simple query protocol does. A
// statement's code is its text with comments and the content of quotes
// blanked out. backslash says whether a backslash escapes the next
// character in '…' quotes.
func splitPostgres(query string, backslash bool) []statement {
	var out []statement
	var code strings.Builder
	start := 0
	isIdent := func(c byte) bool {
		return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c >= 0x80
	}
	for i := 0; i < len(query); i++ {
		c := query[i]
		rest := query[i:]
		switch {
		case c == '\'' || c == '"':
			q := c
			for i++; i < len(query); i++ {
				if query[i] == '\\' && backslash && q == '\'' {
					i++
					continue
				}
				if query[i] == q {
					if i+1 < len(query) && query[i+1] == q {
						i++ // a doubled quote
						continue
					}
					break
				}
			}
			c = ' '
		case strings.HasPrefix(rest, "--"):
			for i+1 < len(query) && query[i+1] != '\n' {
				i++
			}
			c = ' '
		case strings.HasPrefix(rest, "/*"):
			depth := 0
			for ; i < len(query); i++ {
				switch {
				case strings.HasPrefix(query[i:], "/*"):
					depth++
					i++
				case strings.HasPrefix(query[i:], "*/"):
					depth--
					i++
				}
				if depth == 0 {
					break
				}
			}
			c = ' '
		case c == '$' && (i == 0 || !isIdent(query[i-1]) && query[i-1] != '$'):
			// A dollar quote: $tag$ … $tag$, the tag empty or an identifier.
			end := strings.IndexByte(rest[1:], '$')
			tag := ""
			if end >= 0 {
				tag = rest[:end+2]
			}
			if end < 0 || !validDollarTag(tag[1:len(tag)-1]) {
				break // a parameter ($1) or a lone '$'
			}
			close := strings.Index(rest[len(tag):], tag)
			if close < 0 {
				i = len(query)
			} else {
				i += len(tag) + close + len(tag) - 1
			}
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

// validDollarTag reports whether tag can name a dollar quote: empty, or an
// identifier that does not start with a digit.
func validDollarTag(tag string) bool {
	for i := 0; i < len(tag); i++ {
		c := tag[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c >= 0x80 || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// pgRefusal is the error refusing stmt on a PostgreSQL branch of rm.
func pgRefusal(rm, stmt string) error {
	return fmt.Errorf("client: rm %q: %q is transaction control: not allowed inside a global transaction, which the SDK begins, prepares and ends; "+
		"commit or roll back the global transaction (Tx.Commit, Tx.Rollback), or use SAVEPOINT / ROLLBACK TO SAVEPOINT inside it", rm, clipStmt(stmt))
}

// checkText refuses, before it is sent, a statement that would end the
// branch's transaction: transaction control on PostgreSQL, an implicit
// commit on a MariaDB/MySQL commit point (implicit.go).
func (b *Branch) checkText(query string) error {
	if testhook.SkipStatementChecks.Load() {
		return nil
	}
	switch {
	case b.rm.dialect.Driver() == rm.Postgres:
		if stmt := pgTransactionControl(query); stmt != "" {
			return pgRefusal(b.rm.name, stmt)
		}
	case b.selfCP:
		return b.refuseImplicitCommit(query)
	}
	return nil
}

// pgStatus checks that an active PostgreSQL branch is still inside its
// transaction block, as the backend last said (no round trip). after names
// the statement just run, for the error ("" before a statement). It
// returns nil when the status cannot be read (a database/sql connection of
// another driver than pgx, or a connection busy with open rows).
func (b *Branch) pgStatus(after string) error {
	if b.rm.dialect.Driver() != rm.Postgres || b.state != branchActive {
		return nil
	}
	var st byte
	ok, _ := b.withPgx(func(c *pgx.Conn) error {
		if !c.PgConn().IsBusy() {
			st = c.PgConn().TxStatus()
		}
		return nil
	})
	if !ok || st == 0 || st == 'T' {
		return nil
	}
	what := "idle: a statement ended its transaction block (what it wrote before was committed or rolled back by that statement, and anything after would autocommit)"
	if st == 'E' {
		what = "failed: a statement failed inside it, so PostgreSQL will only roll it back"
	}
	where := ""
	if after != "" {
		where = fmt.Sprintf(" after %q", clipStmt(after))
	}
	return fmt.Errorf("client: rm %q: the branch is outside its transaction (the backend's transaction status is %q, %s)%s: "+
		"nothing more is sent on it, and the global transaction is rolled back everywhere at Commit", b.rm.name, st, what, where)
}

// clipStmt is stmt without its surrounding blanks, cut after 80 characters with "…".
func clipStmt(stmt string) string {
	stmt = strings.TrimSpace(stmt)
	if r := []rune(stmt); len(r) > 80 {
		stmt = string(r[:80]) + "…"
	}
	return stmt
}
