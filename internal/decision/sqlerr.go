package decision

import (
	"errors"
	"strings"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// The database errors this package tells apart.
//
//	                     PostgreSQL               MySQL/MariaDB
//	duplicate key        23505 unique_violation   1062 ER_DUP_ENTRY
//	NULL in NOT NULL     23502 not_null_violation 1048 ER_BAD_NULL_ERROR
//	lock wait timeout    55P03 lock_not_available 1205 ER_LOCK_WAIT_TIMEOUT
//	deadlock victim      40P01 deadlock_detected  1213 ER_LOCK_DEADLOCK
//	no such table        42P01 undefined_table    1146 ER_NO_SUCH_TABLE
//	column exists        42701 duplicate_column   1060 ER_DUP_FIELDNAME
//	no such column                                1054 ER_BAD_FIELD_ERROR
//	no parent row        23503 foreign_key_violation 1452 ER_NO_REFERENCED_ROW_2
//	key name exists      42P07 duplicate_table    1061 ER_DUP_KEYNAME
const (
	myDupEntry    = 1062
	myBadNull     = 1048
	myLockWait    = 1205
	myDeadlock    = 1213
	myNoSuchTable = 1146
	myDupColumn   = 1060
	myBadField    = 1054
	myNoParent    = 1452
	myDupKeyName  = 1061
)

func pgCode(err error) string {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func myCode(err error) uint16 {
	var e *mysql.MySQLError
	if errors.As(err, &e) {
		return e.Number
	}
	return 0
}

func isDuplicate(err error) bool { return pgCode(err) == "23505" || myCode(err) == myDupEntry }

// isBadNull reports whether err is NULL refused by the NOT NULL column col
// of the decision table: began_at (the age check) or participants (the
// table's id check).
func isBadNull(err error, col string) bool {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e.Code == "23502" && e.ColumnName == col
	}
	var m *mysql.MySQLError
	return errors.As(err, &m) && m.Number == myBadNull && strings.Contains(m.Message, "'"+col+"'")
}

func isLockTimeout(err error) bool { return pgCode(err) == "55P03" || myCode(err) == myLockWait }

func isDeadlock(err error) bool { return pgCode(err) == "40P01" || myCode(err) == myDeadlock }

func isNoTable(err error) bool { return pgCode(err) == "42P01" || myCode(err) == myNoSuchTable }

// isUnknownColumn reports whether err is MySQL/MariaDB saying the column
// col does not exist.
func isUnknownColumn(err error, col string) bool {
	var m *mysql.MySQLError
	return errors.As(err, &m) && m.Number == myBadField && strings.Contains(m.Message, "'"+col+"'")
}

// isIDCheckFailed reports whether err is a decision table's reference to
// its id refusing a row: the id table beside it holds another id (MariaDB
// names the key and its column).
func isIDCheckFailed(err error) bool {
	var m *mysql.MySQLError
	return errors.As(err, &m) && m.Number == myNoParent && strings.Contains(m.Message, idCheckSuffix+"` FOREIGN KEY (`"+tableIDColumn+"`) REFERENCES")
}
