package client

import (
	"fmt"
	"strings"
)

// A commit point on MySQL/MariaDB is a plain transaction, not an XA branch,
// so the server does not refuse what an XA branch refuses (XAER_RMFAIL):
// statements that end the transaction implicitly (DDL, LOCK TABLES, BEGIN,
// COMMIT, …) would commit its writes before the decision, and a later
// failure of another branch would then split the transaction. The SDK
// refuses them on such a branch instead (and the decision's INSERT also
// requires @@in_transaction = 1).

// implicitCommit lists the first keywords of MySQL/MariaDB statements that
// end the transaction (MariaDB's "Statements That Cause an Implicit
// Commit"), or that control it.
var implicitCommit = map[string]bool{
	"ALTER": true, "CREATE": true, "DROP": true, "RENAME": true, "TRUNCATE": true,
	"LOCK": true, "UNLOCK": true, "BEGIN": true, "START": true, "COMMIT": true,
	"GRANT": true, "REVOKE": true, "FLUSH": true, "ANALYZE": true, "OPTIMIZE": true,
	"REPAIR": true, "CACHE": true, "CHECK": true, "INSTALL": true, "UNINSTALL": true,
	"RESET": true, "PURGE": true, "CHANGE": true, "XA": true, "LOAD": true,
}

// endsTransaction returns the first statement of query (several may be
// joined by ';') that would end or control a MySQL/MariaDB transaction, or
// "" when none does. ROLLBACK TO SAVEPOINT and SET are allowed, but SET
// autocommit and SET TRANSACTION are not.
func endsTransaction(query string) string {
	for _, stmt := range splitStatements(query) {
		words := strings.Fields(strings.ToUpper(stripComments(stmt)))
		if len(words) == 0 {
			continue
		}
		switch w := words[0]; {
		case implicitCommit[w]:
			return stmt
		case w == "ROLLBACK" && !(len(words) > 1 && (words[1] == "TO" || strings.HasPrefix(words[1], "TO"))):
			return stmt
		case w == "ROLLBACK" && len(words) > 2 && words[1] == "WORK":
			return stmt
		case w == "SET" && len(words) > 1 && (strings.Contains(words[1], "AUTOCOMMIT") || words[1] == "TRANSACTION" ||
			(len(words) > 2 && (words[1] == "SESSION" || words[1] == "GLOBAL") && words[2] == "TRANSACTION")):
			return stmt
		}
	}
	return ""
}

// refuseImplicitCommit is the error for such a statement on a commit point.
func (b *Branch) refuseImplicitCommit(query string) error {
	stmt := endsTransaction(query)
	if stmt == "" {
		return nil
	}
	if len(stmt) > 80 {
		stmt = stmt[:80] + "…"
	}
	return fmt.Errorf("client: rm %q: %q would end the transaction (an implicit commit): not allowed inside a global transaction, whose MariaDB/MySQL branch is its commit point; "+
		"run DDL, LOCK TABLES and transaction control outside it (an XA branch refuses them too)", b.rm.name, strings.TrimSpace(stmt))
}

// splitStatements splits query at the semicolons outside quotes and
// comments.
func splitStatements(query string) []string {
	var out []string
	start := 0
	var quote byte
	for i := 0; i < len(query); i++ {
		c := query[i]
		switch {
		case quote != 0:
			if c == '\\' && quote != '`' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"' || c == '`':
			quote = c
		case c == '-' && i+1 < len(query) && query[i+1] == '-', c == '#':
			for i < len(query) && query[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(query) && query[i+1] == '*':
			end := strings.Index(query[i+2:], "*/")
			if end < 0 {
				i = len(query)
			} else {
				i += end + 3
			}
		case c == ';':
			out = append(out, query[start:i])
			start = i + 1
		}
	}
	return append(out, query[start:])
}

// stripComments removes leading comments and blanks from one statement.
func stripComments(s string) string {
	for {
		s = strings.TrimSpace(s)
		switch {
		case strings.HasPrefix(s, "/*"):
			end := strings.Index(s, "*/")
			if end < 0 {
				return ""
			}
			s = s[end+2:]
		case strings.HasPrefix(s, "--"), strings.HasPrefix(s, "#"):
			nl := strings.IndexByte(s, '\n')
			if nl < 0 {
				return ""
			}
			s = s[nl+1:]
		default:
			return s
		}
	}
}
