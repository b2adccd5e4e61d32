package decision

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// TableName is the decision table's name in every commit-point database.
const TableName = "tandem_decision"

// MaxCommitPointAge is the longest a commit point's transaction may run
// before its decision (the SDK's Config.MaxTxnAge: default and maximum).
// Coordinators keep 'A' rows at least this long plus a margin, whatever
// their own --max-txn-age, so that the age check and the 'A' rows together
// always refuse a late commit point.
const MaxCommitPointAge = time.Hour

// Outcome is a recorded decision.
type Outcome byte

// The outcomes, as stored in the outcome column.
const (
	Commit Outcome = 'C'
	Abort  Outcome = 'A'
)

func (o Outcome) String() string {
	switch o {
	case Commit:
		return "commit"
	case Abort:
		return "abort"
	}
	return fmt.Sprintf("outcome(%q)", byte(o))
}

// table is one decision table. The package's functions use TableName; tests
// use a table of their own per run, so that runs never collide.
type table struct{ name string }

var defaultTable = table{name: TableName}

// DDL returns the statement that creates the decision table if it does not
// exist.
func DDL(d rm.Driver) string { return defaultTable.ddl(d) }

func (t table) ddl(d rm.Driver) string {
	if d == rm.MySQL {
		// DATETIME(6) holds UTC_TIMESTAMP(6), so that comparisons do not
		// depend on a session's time zone (TIMESTAMP would, and with
		// explicit_defaults_for_timestamp off it turns an inserted NULL
		// into the current time instead of refusing it).
		return "CREATE TABLE IF NOT EXISTS " + t.name + " (" +
			"gtrid CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, " +
			"outcome CHAR(1) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, " +
			"began_at DATETIME(6) NOT NULL, " +
			"decided_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), " +
			"CONSTRAINT " + t.name + "_outcome CHECK (outcome IN ('C','A'))" +
			") ENGINE=InnoDB"
	}
	return "CREATE TABLE IF NOT EXISTS " + t.name + " (" +
		"gtrid char(32) COLLATE \"C\" PRIMARY KEY, " +
		"outcome char(1) NOT NULL CHECK (outcome IN ('C','A')), " +
		"began_at timestamptz NOT NULL, " +
		"decided_at timestamptz NOT NULL DEFAULT clock_timestamp())"
}

// Ensure creates the decision table if it does not exist. Several processes
// may call it at once.
func Ensure(ctx context.Context, db *sql.DB, d rm.Driver) error {
	return defaultTable.ensure(ctx, db, d)
}

func (t table) ensure(ctx context.Context, db *sql.DB, d rm.Driver) error {
	_, err := db.ExecContext(ctx, t.ddl(d))
	if err != nil && d == rm.Postgres && (pgCode(err) == "23505" || pgCode(err) == "42P07") {
		// Two CREATE TABLE IF NOT EXISTS at once: PostgreSQL may report
		// the loser's pg_type insert as a duplicate. The table exists.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("decision: create table %s: %w; the database user needs the CREATE privilege (or create it as an administrator: tandem init-rm)", t.name, err)
	}
	return nil
}

// literal returns g as an SQL string literal. A GTRID's String is always 32
// lowercase hex digits, so inlining it needs no escaping.
func literal(g xid.GTRID) string { return "'" + g.String() + "'" }

// inList returns gs as "('a','b')".
func inList(gs []xid.GTRID) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, g := range gs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(literal(g))
	}
	b.WriteByte(')')
	return b.String()
}

// checkGTRID refuses the zero gtrid, which no transaction has.
func checkGTRID(g xid.GTRID) error {
	if g.IsZero() {
		return errors.New("decision: the zero gtrid names no transaction")
	}
	return nil
}

// explain wraps err, adding what to do when the table is missing.
func (t table) explain(what string, err error) error {
	if isNoTable(err) {
		return fmt.Errorf("decision: %s: table %s does not exist: run `tandem init-rm` or start the coordinator, which creates it: %w", what, t.name, err)
	}
	return fmt.Errorf("decision: %s: %w", what, err)
}
