package decision

import (
	"database/sql"
	"fmt"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/tandem-tx/tandem/internal/rm"
	"github.com/tandem-tx/tandem/xid"
)

// On PostgreSQL the decision table and its id table are each found on the
// connection's search path, separately: with search_path "a, b", a schema a
// that has a tandem_decision (an older Tandem's, before the id table) and a
// schema b that has both, a statement writes a's decision table while its
// id check reads b's id — which vouches for b's table, not a's. A party
// whose search path is "b" then reaches b's table with the same id, and a
// client's 'C' and a recoverer's 'A' for one gtrid both succeed. So on
// PostgreSQL every check of the id also checks, in the same statement, that
// the id row read is in the schema where the decision table's name
// resolves (a temporary table of the session included: pg_temp is searched
// first). On MySQL/MariaDB an unqualified name is always the connection's
// default database, for both tables.

// pgSameSchema is the SQL condition "the id table row alias (an alias of
// the id table) is in the schema where the decision table's name resolves
// now". NULL (not true) when the decision table is not on the path.
func (t table) pgSameSchema(alias string) string {
	return "(SELECT relnamespace FROM pg_class WHERE oid = to_regclass('" + t.name + "')) = (SELECT relnamespace FROM pg_class WHERE oid = " + alias + ".tableoid)"
}

// pgSchemas is the SQL for two more columns of a read of the id table
// (alias): the schema where the decision table's name resolves (NULL when
// it is not on the path) and the id row's schema.
func (t table) pgSchemas(alias string) string {
	ns := "(SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = "
	return ns + "to_regclass('" + t.name + "')), " + ns + alias + ".tableoid)"
}

// schemasDiffer says why the id read does not vouch for the decision table
// a statement reaches, or nil when it does (same schema).
func (t table) schemasDiffer(dSchema sql.NullString, idSchema string, want xid.Owner) error {
	if dSchema.Valid && dSchema.String == idSchema {
		return nil
	}
	where := "is not on this connection's search path"
	if dSchema.Valid {
		where = "resolves to schema " + dSchema.String
	}
	expected := ""
	if !want.IsZero() {
		expected = " (expected decision table " + want.String() + ")"
	}
	return fmt.Errorf("%w%s: on this connection's search path %s %s, but %s is in schema %s: that id vouches only for the decision table beside it, "+
		"so a party with another search path could reach another table with the same id. Make the search path reach both tables in one schema "+
		"(drop the stray %s, or run tandem init-rm with that search path so that the id table is created beside it)",
		ErrWrongTable, expected, t.name, where, t.id, idSchema, t.name)
}

// driverOf says which database q talks to, when it can tell without a
// round trip (*sql.DB).
func driverOf(q rm.Querier) (rm.Driver, bool) {
	db, ok := q.(*sql.DB)
	if !ok {
		return "", false
	}
	switch db.Driver().(type) {
	case *stdlib.Driver:
		return rm.Postgres, true
	case *mysql.MySQLDriver, mysql.MySQLDriver:
		return rm.MySQL, true
	}
	return "", false
}
