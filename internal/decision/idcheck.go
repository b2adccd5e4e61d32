package decision

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// The decision table's own reference to its id (MySQL/MariaDB).
//
// Every 'C' names the id of the table it expects (Commit.Table), and the
// database compares it. The first form, kept for callers that do not know
// better (older clients, a table not yet migrated), reads the id table in a
// scalar subquery of the INSERT; on MariaDB that subquery is planned and run
// for every decision and cost the server about 50 µs of CPU per transaction
// (measured: 313 against 258 µs per transaction for the whole commit, one
// session). So AddIDCheck gives the MariaDB decision table a column
// table_id, NOT NULL DEFAULT <id>, with a FOREIGN KEY to the id table's id
// (which gets a unique key): an INSERT that writes the id it expects into
// table_id is refused by InnoDB's own foreign-key check unless the id table
// beside it holds exactly that id, which is the subquery's condition,
// without planning a query. The reference also ties the two tables: the id
// row cannot be changed or deleted while a decision row names it (a table
// re-keyed under a client that still expects the old id would otherwise
// accept its decisions), and a table of another deployment, or one older
// than the column, refuses the INSERT (another id; no such column).
//
// A caller may use this checked form once it has read, with the id, that
// the table has exactly this reference (ReadIDChecked). A session with
// foreign_key_checks = 0 would skip the check, so the checked INSERT writes
// NULL into table_id there (RefusedUnchecked). The default keeps every
// other writer's rows valid ('A' keys, older clients): they still check
// through the subquery.
//
// PostgreSQL keeps the subquery: there it also checks that the id row is
// beside the decision table the search path resolves (schema.go).

// tableIDColumn is the decision table's reference to its id.
const tableIDColumn = "table_id"

// idCheckSuffix ends the name of the foreign key on tableIDColumn.
const idCheckSuffix = "_table"

// idCheckLockWait bounds how long AddIDCheck waits for the tables' metadata
// locks (open commit points hold them shared until they end; while the
// ALTER waits, new statements on the table queue behind it). It gives up
// after this and leaves the table as it was: a later call adds it.
const idCheckLockWait = time.Second

func (t table) idCheckName() string { return t.name + idCheckSuffix }

// IDCheckedQuery is the query ReadIDChecked sends: one row of two columns,
// the id (a string) and 1 when the decision table references that id
// itself (the foreign key), else 0. For callers that read through their own
// connections.
func IDCheckedQuery(d rm.Driver) string { return defaultTable.idCheckedQuery(d) }

func (t table) idCheckedQuery(d rm.Driver) string {
	if d != rm.MySQL {
		return "SELECT id, 0 FROM " + t.id
	}
	return "SELECT i.id, (SELECT count(*) FROM information_schema.KEY_COLUMN_USAGE k WHERE k.CONSTRAINT_SCHEMA = DATABASE() AND k.TABLE_SCHEMA = DATABASE() AND k.TABLE_NAME = '" + t.name +
		"' AND k.CONSTRAINT_NAME = '" + t.idCheckName() + "' AND k.COLUMN_NAME = '" + tableIDColumn + "' AND k.REFERENCED_TABLE_SCHEMA = DATABASE() AND k.REFERENCED_TABLE_NAME = '" + t.id +
		"' AND k.REFERENCED_COLUMN_NAME = 'id') FROM " + t.id + " i"
}

// ReadIDChecked returns the id of the decision table q reaches, as ReadID,
// and whether that table references the id itself (Commit.TableChecked may
// be set for decisions sent through the same connection). Always false on
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
		return xid.Owner{}, false, fmt.Errorf("decision: read whether %s references its id: %w", t.name, err)
	}
	if s != id.String() {
		return xid.Owner{}, false, fmt.Errorf("decision: the id of %s changed while it was read (%s, then %s): inspect %s", t.name, id, s, t.id)
	}
	return id, n == 1, nil
}

// AddIDCheck gives a MySQL/MariaDB decision table (made by Ensure, with its
// id row) its reference to its id, if it has none: a unique key on the id
// table's id, the column table_id (DEFAULT the id) and the foreign key. It
// looks first, so that a table that has it is never altered; it waits at
// most idCheckLockWait for the tables, and adds the key without checking
// the rows (foreign_key_checks = 0 for that statement only: every row has
// the default, the id), so that MariaDB builds it in place without copying
// the table. Nothing on PostgreSQL. A table without the reference stays
// valid (decisions check through the subquery), so callers may treat an
// error as a warning: it says what is missing and what to run.
func AddIDCheck(ctx context.Context, db *sql.DB, d rm.Driver) error {
	return defaultTable.addIDCheck(ctx, db, d)
}

func (t table) addIDCheck(ctx context.Context, db *sql.DB, d rm.Driver) error {
	if d != rm.MySQL {
		return nil
	}
	id, checked, err := t.readIDChecked(ctx, db, d)
	if err != nil {
		return err
	}
	if checked {
		return t.repairIDDefault(ctx, db, id)
	}
	var cols, keys int
	q := "SELECT (SELECT count(*) FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" + t.name + "' AND COLUMN_NAME = '" + tableIDColumn + "'), " +
		"(SELECT count(*) FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" + t.id + "' AND INDEX_NAME = '" + t.id + "_id')"
	if err := db.QueryRowContext(ctx, q).Scan(&cols, &keys); err != nil {
		return fmt.Errorf("decision: look for %s.%s: %w", t.name, tableIDColumn, err)
	}
	wait := " WAIT " + fmt.Sprint(int(idCheckLockWait.Seconds())) + " "
	// In place, never a copy of the table, and never blocking writes while
	// the index is built: a server that cannot refuses, and the table stays
	// as it was.
	const online = ", ALGORITHM=INPLACE, LOCK=NONE"
	var stmts []string
	if keys == 0 {
		stmts = append(stmts, "ALTER TABLE "+t.id+wait+"ADD UNIQUE KEY "+t.id+"_id (id)"+online)
	}
	fk := "ADD CONSTRAINT " + t.idCheckName() + " FOREIGN KEY (" + tableIDColumn + ") REFERENCES " + t.id + " (id)"
	if cols == 0 {
		fk = "ADD COLUMN " + tableIDColumn + " CHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT " + ownerLiteral(id) + ", " + fk
	} else {
		// A column without the key (a half-made earlier attempt): its
		// default must be this id for the rows other writers add.
		fk = "ALTER COLUMN " + tableIDColumn + " SET DEFAULT " + ownerLiteral(id) + ", " + fk
	}
	stmts = append(stmts, "SET STATEMENT foreign_key_checks = 0 FOR ALTER TABLE "+t.name+wait+fk+online)
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil && myCode(err) != myDupKeyName && myCode(err) != myDupColumn {
			return fmt.Errorf("decision: give %s its reference to its id (%s): %w; decisions still check the id, through %s (slower); "+
				"run tandem init-rm as a user allowed to ALTER both tables, when no long transaction holds them", t.name, s, err, t.id)
		}
	}
	if _, checked, err := t.readIDChecked(ctx, db, d); err != nil || !checked {
		return errors.Join(fmt.Errorf("decision: %s still has no reference to its id after adding it (another process may be adding it)", t.name), err)
	}
	return nil
}

// repairIDDefault makes table_id's default the current id (the rows that
// writers omitting the column add: 'A' keys, older clients, the subquery
// form). The id can change only while no decision row names it (a table
// emptied, then re-keyed), and the old default would then make every such
// insert fail the foreign key. SET DEFAULT changes only the table's
// definition.
func (t table) repairIDDefault(ctx context.Context, db *sql.DB, id xid.Owner) error {
	var def sql.NullString
	q := "SELECT COLUMN_DEFAULT FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" + t.name + "' AND COLUMN_NAME = '" + tableIDColumn + "'"
	if err := db.QueryRowContext(ctx, q).Scan(&def); err != nil {
		return fmt.Errorf("decision: read the default of %s.%s: %w", t.name, tableIDColumn, err)
	}
	if def.Valid && (def.String == ownerLiteral(id) || def.String == id.String()) {
		return nil
	}
	s := "ALTER TABLE " + t.name + " WAIT " + fmt.Sprint(int(idCheckLockWait.Seconds())) + " ALTER COLUMN " + tableIDColumn + " SET DEFAULT " + ownerLiteral(id)
	if _, err := db.ExecContext(ctx, s); err != nil {
		return fmt.Errorf("decision: %s.%s defaults to %s, not the table's id %s (the id was replaced): %s: %w; until it is fixed, "+
			"keys and older clients' decisions fail there: run tandem init-rm as a user allowed to ALTER it", t.name, tableIDColumn, def.String, id, s, err)
	}
	return nil
}
