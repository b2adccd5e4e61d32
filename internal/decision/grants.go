package decision

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/tandem-tx/tandem/internal/rm"
)

// Writers is who, besides the current user, may write the decision tables
// (tandem_decision and tandem_decision_id) a connection reaches: an INSERT
// of 'C' or 'A', or a changed id, decides transactions, so only the
// application's user and the coordinator's should hold it.
type Writers struct {
	// Others are the accounts (PostgreSQL roles, PUBLIC included;
	// MySQL/MariaDB 'user'@'host' or roles) with INSERT, UPDATE or DELETE
	// (PostgreSQL also TRUNCATE; MySQL/MariaDB also DROP, which TRUNCATE
	// TABLE needs) on either table, directly or through a
	// role, a database-wide or global grant; not the current user, not
	// superusers (PostgreSQL), not those allowed. Sorted.
	Others []string
	// Partial says the list may be short, and why: the current user may not
	// read every account's grants (MySQL/MariaDB: SELECT on mysql.user,
	// mysql.db and mysql.tables_priv), so only its own are shown.
	Partial string
}

// OtherWriters lists who, besides the current user and the accounts in
// allowed, may write the decision tables q reaches. An allowed name matches
// a PostgreSQL role, or a MySQL/MariaDB user at any host ("app") or at one
// host ("app@10.0.0.%").
//
// PostgreSQL: every role (not a superuser, not a predefined pg_ role) for
// which has_table_privilege says INSERT, UPDATE, DELETE or TRUNCATE on either
// table — the tables' owner and members of granted roles included; a grant
// to PUBLIC is reported as PUBLIC alone. MySQL/MariaDB: the grants in
// mysql.user (global), mysql.db (this database, patterns matched) and
// mysql.tables_priv (the two tables) with Insert, Update, Delete or Drop
// (which TRUNCATE TABLE needs); without
// the privilege to read them, the current user's own grants from
// information_schema, and Partial says so.
func OtherWriters(ctx context.Context, q rm.Querier, d rm.Driver, allowed []string) (Writers, error) {
	return defaultTable.otherWriters(ctx, q, d, allowed)
}

func (t table) otherWriters(ctx context.Context, q rm.Querier, d rm.Driver, allowed []string) (Writers, error) {
	var w Writers
	var names []string
	var err error
	if d == rm.MySQL {
		names, err = t.strings(ctx, q, t.myGrantsQuery())
		if err != nil && myCode(err) == myTableAccessDenied {
			w.Partial = "this user may not read mysql.user, mysql.db and mysql.tables_priv, so only its own grants are shown: run init-rm as an administrator to see every account's"
			names, err = t.strings(ctx, q, t.mySelfQuery())
		}
	} else {
		var public []string
		public, err = t.strings(ctx, q, t.pgPublicQuery())
		if err == nil && len(public) > 0 {
			names = public
		} else if err == nil {
			names, err = t.strings(ctx, q, t.pgRolesQuery())
		}
	}
	if err != nil {
		return Writers{}, fmt.Errorf("decision: read who may write %s and %s: %w", t.name, t.id, err)
	}
	for _, n := range names {
		if !allowedAccount(d, n, allowed) {
			w.Others = append(w.Others, n)
		}
	}
	sort.Strings(w.Others)
	w.Others = compactStrings(w.Others)
	return w, nil
}

// myTableAccessDenied is ER_TABLEACCESS_DENIED_ERROR (SELECT command denied).
const myTableAccessDenied = 1142

// privs is the PostgreSQL privileges that write.
const privs = "INSERT, UPDATE, DELETE, TRUNCATE"

func (t table) pgPublicQuery() string {
	return "SELECT DISTINCT 'PUBLIC' FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid IN (to_regclass('" + t.name + "'), to_regclass('" + t.id + "')) " +
		"AND a.grantee = 0 AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')"
}

func (t table) pgRolesQuery() string {
	has := func(tbl string) string {
		return "(to_regclass('" + tbl + "') IS NOT NULL AND has_table_privilege(r.oid, to_regclass('" + tbl + "'), '" + privs + "'))"
	}
	return "SELECT r.rolname FROM pg_roles r WHERE r.rolname <> current_user AND NOT r.rolsuper AND r.rolname NOT LIKE 'pg\\_%' " +
		"AND (" + has(t.name) + " OR " + has(t.id) + ") ORDER BY 1"
}

// myGrantsQuery reads every account's grants that reach the two tables.
// mysql.db's Db is a LIKE pattern ('\_' a literal underscore).
func (t table) myGrantsQuery() string {
	acct := "CONCAT(\"'\", User, \"'@'\", Host, \"'\")"
	// Drop: TRUNCATE TABLE needs it, and DROP TABLE loses every row.
	writes := bin("Insert_priv") + " = 'Y' OR " + bin("Update_priv") + " = 'Y' OR " + bin("Delete_priv") + " = 'Y' OR " + bin("Drop_priv") + " = 'Y'"
	me := "CONCAT(\"'\", SUBSTRING_INDEX(CURRENT_USER(), '@', 1), \"'@'\", SUBSTRING_INDEX(CURRENT_USER(), '@', -1), \"'\")"
	return "SELECT DISTINCT a FROM (" +
		"SELECT " + acct + " AS a FROM mysql.user WHERE " + writes + " " +
		"UNION ALL SELECT " + acct + " FROM mysql.db WHERE " + bin("DATABASE()") + " LIKE " + bin("Db") + " AND (" + writes + ") " +
		"UNION ALL SELECT " + acct + " FROM mysql.tables_priv WHERE " + bin("Db") + " = " + bin("DATABASE()") + " AND " + bin("Table_name") + " IN ('" + t.name + "', '" + t.id + "') " +
		"AND (FIND_IN_SET('Insert', Table_priv) OR FIND_IN_SET('Update', Table_priv) OR FIND_IN_SET('Delete', Table_priv) OR FIND_IN_SET('Drop', Table_priv))" +
		") g WHERE " + bin("a") + " <> " + bin(me) + " ORDER BY 1"
}

// mySelfQuery is what information_schema shows without the privilege to
// read the mysql schema: the current user's own grants (and PUBLIC's).
func (t table) mySelfQuery() string {
	me := "CONCAT(\"'\", SUBSTRING_INDEX(CURRENT_USER(), '@', 1), \"'@'\", SUBSTRING_INDEX(CURRENT_USER(), '@', -1), \"'\")"
	return "SELECT DISTINCT GRANTEE FROM (" +
		"SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES WHERE DATABASE() LIKE TABLE_SCHEMA " +
		"UNION ALL SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.TABLE_PRIVILEGES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ('" + t.name + "', '" + t.id + "') " +
		"UNION ALL SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES) g " +
		"WHERE PRIVILEGE_TYPE IN ('INSERT', 'UPDATE', 'DELETE', 'DROP') AND " + bin("GRANTEE") + " <> " + bin(me) + " ORDER BY 1"
}

// bin is expr compared byte by byte: the mysql schema, information_schema
// and CURRENT_USER() have different collations.
func bin(expr string) string { return "CONVERT(" + expr + " USING utf8mb4) COLLATE utf8mb4_bin" }

// strings runs query, which lists strings.
func (table) strings(ctx context.Context, q rm.Querier, query string) ([]string, error) {
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, rows.Err()
}

// allowedAccount reports whether account (a PostgreSQL role, or MySQL's
// 'user'@'host') is one of allowed.
func allowedAccount(d rm.Driver, account string, allowed []string) bool {
	user, host := account, ""
	if d == rm.MySQL {
		if u, h, ok := strings.Cut(account, "'@'"); ok {
			user, host = strings.TrimPrefix(u, "'"), strings.TrimSuffix(h, "'")
		}
	}
	for _, a := range allowed {
		au, ah, withHost := strings.Cut(a, "@")
		if au == user && (!withHost || d != rm.MySQL || ah == host) {
			return true
		}
	}
	return false
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, x := range s {
		if i == 0 || x != s[i-1] {
			out = append(out, x)
		}
	}
	return out
}
