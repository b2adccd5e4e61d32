package decision

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// ErrWrongTable means the decision table a statement reached is not the one
// its caller expects: the id row of tandem_decision_id differs from the
// owner id the caller named (another schema, another default database,
// another server). Nothing was decided or read as a decision. It is worth an
// alarm: a client and a coordinator that reach different tables for one
// commit point could each record a different outcome.
var ErrWrongTable = errors.New("decision: wrong decision table: its id is not the one expected")

// ErrNoID means the database has no decision-table id (tandem_decision_id is
// missing or empty).
var ErrNoID = errors.New("decision: the database has no decision-table id: run `tandem init-rm` (or start a coordinator that has this database in --rm)")

// RowQuerier is what ReadID reads through: *sql.DB, *sql.Conn, *sql.Tx.
type RowQuerier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// ReadID returns the id of the decision table q reaches: the one row of
// tandem_decision_id. A missing table or row is ErrNoID (wrapped, naming
// `tandem init-rm`). On PostgreSQL the two tables must resolve to one
// schema on q's search path: otherwise ErrWrongTable (wrapped, naming both
// schemas), or ErrNoID when tandem_decision is not on the path at all.
func ReadID(ctx context.Context, q RowQuerier, d rm.Driver) (xid.Owner, error) {
	return defaultTable.readID(ctx, q, d)
}

func (t table) readID(ctx context.Context, q RowQuerier, d rm.Driver) (xid.Owner, error) {
	var s string
	var err error
	if d == rm.Postgres {
		// and where both tables are (schema.go): an id beside another
		// decision table than the one statements reach vouches for nothing.
		var dSchema sql.NullString
		var idSchema string
		err = q.QueryRowContext(ctx, "SELECT i.id, "+t.pgSchemas("i")+" FROM "+t.id+" i").Scan(&s, &dSchema, &idSchema)
		if err == nil && !dSchema.Valid {
			return xid.Owner{}, fmt.Errorf("%w (%s is not on this connection's search path; %s is in schema %s)", ErrNoID, t.name, t.id, idSchema)
		}
		if err == nil {
			if err := t.schemasDiffer(dSchema, idSchema, xid.Owner{}); err != nil {
				return xid.Owner{}, fmt.Errorf("decision: read the decision-table id: %w", err)
			}
		}
	} else {
		err = q.QueryRowContext(ctx, "SELECT id FROM "+t.id).Scan(&s)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return xid.Owner{}, fmt.Errorf("%w (%s has no row)", ErrNoID, t.id)
	case isNoTable(err):
		return xid.Owner{}, fmt.Errorf("%w (%s does not exist): %w", ErrNoID, t.id, err)
	case err != nil:
		return xid.Owner{}, fmt.Errorf("decision: read the decision-table id from %s: %w", t.id, err)
	}
	o, err := xid.ParseOwner(s)
	if err != nil {
		return xid.Owner{}, fmt.Errorf("decision: the id in %s is not an id (%w): the table was written by something else; inspect it", t.id, err)
	}
	return o, nil
}

// wrongTable says which table was expected and which was found.
func wrongTable(what string, want, got xid.Owner) error {
	return fmt.Errorf("%w: %s: expected decision table %s, this database's is %s — the DSN reaches another schema, database or server than the commit point's; "+
		"fix the DSN (search_path, default database) so that every party reaches the same table", ErrWrongTable, what, want, got)
}
