// Package rm holds what Tandem knows about each kind of resource manager
// (database): the SQL of every step of a branch's life (Dialect), the in-doubt
// scan, how each database reports "no such prepared branch", and the
// coordinator's pooled connection to one named database (Conn).
//
// Supported drivers: "postgres" (PostgreSQL, through pgx) and "mysql" (MySQL
// and MariaDB, through go-sql-driver/mysql).
//
// Every statement here is idempotent in the sense phase 2 needs: committing or
// rolling back a prepared branch that the database no longer knows reports
// ErrBranchNotFound, which after a crash means "already done".
package rm
