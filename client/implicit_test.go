package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEndsTransaction runs the corpus shared with the Java client's
// ImplicitCommitTest (api/testdata/implicit-commit.txt).
func TestEndsTransaction(t *testing.T) {
	cases := implicitCorpus(t)
	if len(cases) < 40 {
		t.Fatalf("the corpus has %d cases: read the wrong file?", len(cases))
	}
	for _, tc := range cases {
		if got := endsTransaction(tc.q) != ""; got != tc.ends {
			t.Errorf("endsTransaction(%q) = %v, want %v", tc.q, got, tc.ends)
		}
	}
}

type implicitCase struct {
	q    string
	ends bool
}

// implicitCorpus reads api/testdata/implicit-commit.txt: "ends STMT" or
// "keeps STMT" per line, with \n, \t and \\ escapes, # comments.
func implicitCorpus(t *testing.T) []implicitCase {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "api", "testdata", "implicit-commit.txt"))
	if err != nil {
		t.Fatal(err)
	}
	unescape := strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\t`, "\t")
	var out []implicitCase
	for i, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		verb, stmt, ok := strings.Cut(line, " ")
		if !ok || verb != "ends" && verb != "keeps" {
			t.Fatalf("implicit-commit.txt:%d: want \"ends STMT\" or \"keeps STMT\", got %q", i+1, line)
		}
		out = append(out, implicitCase{q: unescape.Replace(stmt), ends: verb == "ends"})
	}
	return out
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
