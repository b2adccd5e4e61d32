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

// IDTableName is the table that holds the decision table's identity: exactly
// one row (id, created_at), made with the table (Ensure, tandem init-rm).
const IDTableName = "tandem_decision_id"

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
	Committed Outcome = 'C'
	Aborted   Outcome = 'A'
)

func (o Outcome) String() string {
	switch o {
	case Committed:
		return "commit"
	case Aborted:
		return "abort"
	}
	return fmt.Sprintf("outcome(%q)", byte(o))
}

// table is one decision table and its id table. The package's functions use
// TableName and IDTableName; tests use tables of their own per run, so that
// runs never collide.
type table struct {
	name, id string
	// betweenKeyAndRead, when set (tests), runs in Resolve between the
	// duplicate key and the read of the row.
	betweenKeyAndRead func()
}

var defaultTable = table{name: TableName, id: IDTableName}

// DDL returns the statements that create the decision table and its id table
// if they do not exist (the id row is Ensure's).
func DDL(d rm.Driver) []string { return defaultTable.ddl(d) }

func (t table) ddl(d rm.Driver) []string {
	if d == rm.MySQL {
		// DATETIME(6) holds UTC_TIMESTAMP(6), so that comparisons do not
		// depend on a session's time zone (TIMESTAMP would, and with
		// explicit_defaults_for_timestamp off it turns an inserted NULL
		// into the current time instead of refusing it).
		return []string{"CREATE TABLE IF NOT EXISTS " + t.name + " (" +
			"gtrid CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY, " +
			"outcome CHAR(1) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, " +
			"began_at DATETIME(6) NOT NULL, " +
			"decided_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), " +
			"participants TEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT '', " +
			"CONSTRAINT " + t.name + "_outcome CHECK (outcome IN ('C','A'))" +
			") ENGINE=InnoDB",
			// one is a constant primary key: a second row is a duplicate.
			"CREATE TABLE IF NOT EXISTS " + t.id + " (" +
				"one TINYINT NOT NULL DEFAULT 1 PRIMARY KEY, " +
				"id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, " +
				"created_at DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)), " +
				"CONSTRAINT " + t.id + "_one CHECK (one = 1), " +
				"CONSTRAINT " + t.id + "_hex CHECK (id REGEXP '^[0-9a-f]{32}$' AND id <> '00000000000000000000000000000000')" +
				") ENGINE=InnoDB"}
	}
	return []string{"CREATE TABLE IF NOT EXISTS " + t.name + " (" +
		"gtrid char(32) COLLATE \"C\" PRIMARY KEY, " +
		"outcome char(1) NOT NULL CHECK (outcome IN ('C','A')), " +
		"began_at timestamptz NOT NULL, " +
		"decided_at timestamptz NOT NULL DEFAULT clock_timestamp(), " +
		"participants text COLLATE \"C\" NOT NULL DEFAULT '')",
		"CREATE TABLE IF NOT EXISTS " + t.id + " (" +
			"one boolean PRIMARY KEY DEFAULT true CHECK (one), " +
			"id char(32) COLLATE \"C\" NOT NULL CHECK (id ~ '^[0-9a-f]{32}$' AND id <> '00000000000000000000000000000000'), " +
			"created_at timestamptz NOT NULL DEFAULT clock_timestamp())"}
}

// Ensure creates the decision table and its id table if they do not exist,
// gives the id table its one row (a random id, xid.NewOwner) if it has none,
// and adds the participants column to a decision table made before it
// existed (NOT NULL DEFAULT ”: the old rows name no participants).
// Several processes may call it at once: one id row is made, and every
// caller then reads the same id (ReadID). The table's reference to its id
// (MariaDB) is AddIDCheck's, run by the coordinator and tandem init-rm.
func Ensure(ctx context.Context, db *sql.DB, d rm.Driver) error {
	return defaultTable.ensure(ctx, db, d)
}

func (t table) ensure(ctx context.Context, db *sql.DB, d rm.Driver) error {
	for i, s := range t.ddl(d) {
		_, err := db.ExecContext(ctx, s)
		if err != nil && d == rm.Postgres && (pgCode(err) == "23505" || pgCode(err) == "42P07" || pgCode(err) == "42710") {
			// Two CREATE TABLE IF NOT EXISTS at once: PostgreSQL may report
			// the loser's pg_type insert as a duplicate key (23505), or its
			// row type as a duplicate object (42710: type "…" already
			// exists). Fine if the table now exists; a type of that name
			// without the table (a composite type has a pg_class row too,
			// not a table's) is a real conflict, and stays an error.
			var exists bool
			name := []string{t.name, t.id}[i]
			if qerr := db.QueryRowContext(ctx, "SELECT EXISTS (SELECT 1 FROM pg_class WHERE oid = to_regclass($1) AND relkind IN ('r', 'p'))", name).Scan(&exists); qerr == nil && exists {
				err = nil
			}
		}
		if err != nil {
			return fmt.Errorf("decision: create the tables %s and %s: %w; the database user needs the CREATE privilege (or create them as an administrator: tandem init-rm)", t.name, t.id, err)
		}
	}
	if err := t.migrate(ctx, db, d); err != nil {
		return err
	}
	// The one row. Never a statement that locks an existing id row
	// exclusively: on InnoDB every open commit point holds a shared lock on
	// it (its INSERT's participants subquery) until its COMMIT, and an
	// exclusive request would wait for it and, queued, make every later
	// decision wait behind it. So: a plain read first (no lock), and only
	// if there is no row an insert that does nothing on a duplicate (a
	// shared lock at most). Of concurrent inserts the constant key admits one.
	if _, err := t.readID(ctx, db, d); err == nil {
		return nil
	} else if errors.Is(err, ErrWrongTable) {
		return err // the two tables in different schemas (schema.go): no row to add
	}
	ins := "INSERT INTO " + t.id + " (id) VALUES ('" + xid.NewOwner().String() + "') ON CONFLICT DO NOTHING"
	if d == rm.MySQL {
		ins = "INSERT IGNORE INTO " + t.id + " (id) VALUES ('" + xid.NewOwner().String() + "')"
	}
	if _, err := db.ExecContext(ctx, ins); err != nil {
		return fmt.Errorf("decision: give %s its id row: %w; the database user needs INSERT on it (or run tandem init-rm as one who has)", t.id, err)
	}
	if _, err := t.readID(ctx, db, d); err != nil {
		return fmt.Errorf("decision: give %s its id row: %w", t.id, err)
	}
	return nil
}

// migrate adds the participants column to a decision table made before it
// existed. It looks first, so that a table that has it is not locked by an
// ALTER TABLE on every start.
func (t table) migrate(ctx context.Context, db *sql.DB, d rm.Driver) error {
	q := "SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass('" + t.name + "') AND attname = 'participants' AND NOT attisdropped"
	alter := "ALTER TABLE " + t.name + " ADD COLUMN IF NOT EXISTS participants text COLLATE \"C\" NOT NULL DEFAULT ''"
	if d == rm.MySQL {
		q = "SELECT count(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" + t.name + "' AND COLUMN_NAME = 'participants'"
		alter = "ALTER TABLE " + t.name + " ADD COLUMN participants TEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT ''"
	}
	var n int
	if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
		return fmt.Errorf("decision: look for the participants column of %s: %w", t.name, err)
	}
	if n > 0 {
		return nil
	}
	_, err := db.ExecContext(ctx, alter)
	if err != nil && (pgCode(err) == "42701" || myCode(err) == myDupColumn) {
		err = nil // another process added it first
	}
	if err != nil {
		return fmt.Errorf("decision: add the participants column to %s: %w; the database user needs ALTER on it (or run tandem init-rm as one who has)", t.name, err)
	}
	return nil
}

// literal returns g as an SQL string literal. A GTRID's String is always 32
// lowercase hex digits, so inlining it needs no escaping.
func literal(g xid.GTRID) string { return "'" + g.String() + "'" }

// ownerLiteral returns o as an SQL string literal (32 hex digits: no escaping).
func ownerLiteral(o xid.Owner) string { return "'" + o.String() + "'" }

// stringLiteral returns s as an SQL string literal that is safe on both
// databases whatever the session's modes: quotes doubled, and on MySQL
// backslashes doubled (with NO_BACKSLASH_ESCAPES the value would differ, but
// the literal still ends where it should).
func stringLiteral(d rm.Driver, s string) string {
	s = strings.ReplaceAll(s, "'", "''")
	if d == rm.MySQL {
		s = strings.ReplaceAll(s, `\`, `\\`)
	}
	return "'" + s + "'"
}

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
		return fmt.Errorf("decision: %s: table %s or %s does not exist: run `tandem init-rm` or start the coordinator, which creates them: %w", what, t.name, t.id, err)
	}
	return fmt.Errorf("decision: %s: %w", what, err)
}
