package decision

import (
	"context"
	"fmt"

	"github.com/tandem-tx/tandem/internal/rm"
)

// OtherWriters lists who, besides the current user (and a PostgreSQL
// table's owner), may write the decision table q sees: an INSERT of 'C' or
// 'A' decides a transaction, so only the application's user and the
// coordinator's should hold it. On PostgreSQL it reads the table's ACL
// (PUBLIC included); on MySQL/MariaDB the grants information_schema shows
// this user (other users' grants need privileges it may not have: the list
// can be short, never wrong). Superusers are not listed.
func OtherWriters(ctx context.Context, q rm.Querier, d rm.Driver) ([]string, error) {
	query := "SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END " +
		"FROM pg_class c, aclexplode(c.relacl) a WHERE c.oid = to_regclass('" + TableName + "') " +
		"AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE') AND a.grantee <> c.relowner " +
		"AND (a.grantee = 0 OR pg_get_userbyid(a.grantee) <> current_user) ORDER BY 1"
	if d == rm.MySQL {
		me := "CONCAT(\"'\", SUBSTRING_INDEX(CURRENT_USER(), '@', 1), \"'@'\", SUBSTRING_INDEX(CURRENT_USER(), '@', -1), \"'\")"
		query = "SELECT DISTINCT GRANTEE FROM (" +
			"SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES WHERE TABLE_SCHEMA = DATABASE() " +
			"UNION ALL SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.TABLE_PRIVILEGES WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '" + TableName + "' " +
			"UNION ALL SELECT GRANTEE, PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES) g " +
			"WHERE PRIVILEGE_TYPE IN ('INSERT', 'UPDATE', 'DELETE') AND GRANTEE <> " + me + " ORDER BY 1"
	}
	rows, err := q.QueryContext(ctx, query)
	if err != nil {
		return nil, fmt.Errorf("decision: read who may write %s: %w", TableName, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var g string
		if err := rows.Scan(&g); err != nil {
			return nil, fmt.Errorf("decision: read who may write %s: %w", TableName, err)
		}
		out = append(out, g)
	}
	return out, rows.Err()
}
