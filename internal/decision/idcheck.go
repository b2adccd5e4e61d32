package decision

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// The decision table's own id check (MySQL/MariaDB).
//
// Every 'C' names the id of the table it expects (Commit.Table), and the
// database compares it. The first form, kept for callers that do not know
// better (the Java and Python clients, a table not yet migrated), reads the
// id table in a scalar subquery of the INSERT; on MariaDB that subquery is
// planned and run for every decision and cost the server about 50 µs of CPU
// per transaction, as much as the rest of the decision's checks together
// (measured: 313 against 258 µs per transaction for the whole commit, one
// session). So Ensure also gives the MariaDB decision table a column
// table_id, NOT NULL DEFAULT <id>, with a CHECK constraint table_id = <id>:
// the table carries its own id, and an INSERT that writes the id it expects
// into table_id is refused by the table itself when it reaches another one
// (another deployment's: its CHECK names another id; an older table: no such
// column). The default keeps every other writer's rows valid ('A' keys,
// older clients): they still check through the subquery.
//
// A caller may use the checked form only once it has read, through the same
// connection as its decisions, that the table checks its id (ReadIDChecked).
// A session with check_constraint_checks = 0 would skip the CHECK, so the
// checked INSERT writes NULL into table_id there (RefusedUnchecked).
//
// PostgreSQL keeps the subquery: there it also checks that the id row is
// beside the decision table the search path resolves (schema.go), which a
// CHECK copied into a temporary table would not.

// tableIDColumn is the decision table's copy of its id.
const tableIDColumn = "table_id"

// idCheckSuffix ends the name of the CHECK constraint on tableIDColumn.
const idCheckSuffix = "_table"

// idCheckLockWait bounds how long Ensure waits for the table to itself to
// add the check (open commit points hold it shared until they end; while the
// ALTER waits, new statements on the table queue behind it). It gives up
// after this and leaves the table as it was: a later Ensure adds it.
const idCheckLockWait = time.Second

func (t table) idCheckName() string { return t.name + idCheckSuffix }

// IDCheckedQuery is the query ReadIDChecked sends: one row of two columns,
// the id (a string) and 1 when the decision table checks that id itself, else
// 0. For callers that read through their own connections.
func IDCheckedQuery(d rm.Driver) string { return defaultTable.idCheckedQuery(d) }

func (t table) idCheckedQuery(d rm.Driver) string {
	if d != rm.MySQL {
		return "SELECT id, 0 FROM " + t.id
	}
	// The clause as MariaDB stores it, exactly: anything else (another id,
	// a looser condition) is not the check.
	return "SELECT i.id, (SELECT count(*) FROM information_schema.CHECK_CONSTRAINTS c WHERE c.CONSTRAINT_SCHEMA = DATABASE() AND c.TABLE_NAME = '" + t.name +
		"' AND c.CONSTRAINT_NAME = '" + t.idCheckName() + "' AND c.CHECK_CLAUSE = concat('`" + tableIDColumn + "` = ''', i.id, '''')) FROM " + t.id + " i"
}

// ReadIDChecked returns the id of the decision table q reaches, as ReadID,
// and whether that table checks the id itself (Commit.TableChecked may be
// set for decisions sent through the same connection). Always false on
// PostgreSQL.
func ReadIDChecked(ctx context.Context, q RowQuerier, d rm.Driver) (xid.Owner, bool, error) {
	return defaultTable.readIDChecked(ctx, q, d)
}

func (t table) readIDChecked(ctx context.Context, q RowQuerier, d rm.Driver) (xid.Owner, bool, error) {
	id, err := t.readID(ctx, q, d)
	if err != nil || d != rm.MySQL {
		return id, false, err
	}
	var s string
	var n int
	if err := q.QueryRowContext(ctx, t.idCheckedQuery(d)).Scan(&s, &n); err != nil {
		return xid.Owner{}, false, fmt.Errorf("decision: read whether %s checks its id: %w", t.name, err)
	}
	if s != id.String() {
		return xid.Owner{}, false, fmt.Errorf("decision: the id of %s changed while it was read (%s, then %s): inspect %s", t.name, id, s, t.id)
	}
	return id, n == 1, nil
}

// addIDCheck gives a MySQL/MariaDB decision table its id check (id is the
// one of its id table) if it has none. It looks first, so that a table that
// has it is never locked. It never fails Ensure: a table without the check
// is valid (decisions check through the subquery), so a user without ALTER,
// a lock held past idCheckLockWait, or a table whose column names another
// id (the id row was replaced: worth a look, not a refusal here) leave it
// as it is.
func (t table) addIDCheck(ctx context.Context, db *sql.DB, d rm.Driver, id xid.Owner) {
	if d != rm.MySQL {
		return
	}
	if _, checked, err := t.readIDChecked(ctx, db, d); err != nil || checked {
		return
	}
	var cols int
	q := "SELECT count(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" + t.name + "' AND COLUMN_NAME = '" + tableIDColumn + "'"
	if err := db.QueryRowContext(ctx, q).Scan(&cols); err != nil {
		return
	}
	check := "ADD CONSTRAINT " + t.idCheckName() + " CHECK (" + tableIDColumn + " = " + ownerLiteral(id) + ")"
	alter := "ALTER TABLE " + t.name + " WAIT " + fmt.Sprint(int(idCheckLockWait.Seconds())) + " "
	if cols == 0 {
		alter += "ADD COLUMN " + tableIDColumn + " CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT " + ownerLiteral(id) + ", " + check
	} else {
		alter += check
	}
	// An error leaves the table as it was: another process added the check
	// first, no ALTER privilege, a lock held too long (see above).
	_, _ = db.ExecContext(ctx, alter)
}
