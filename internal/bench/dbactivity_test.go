package bench

import (
	"testing"
	"time"
)

// Every statement Tandem sends is named by its role, the application's by
// its verb; each server state by what it waits on.
func TestActivityClassifiesStatementsAndWaits(t *testing.T) {
	for q, want := range map[string]string{
		"": "(between statements)",
		"SET LOCAL synchronous_commit = on; INSERT INTO tandem_decision (gtrid, outcome, began_at, participants) VALUES ('a', 'C', now(), 'x'); COMMIT": "decision (INSERT 'C' + commit)",
		"INSERT INTO tandem_decision (gtrid) VALUES ('a'); XA END 'x'; XA COMMIT 'x' ONE PHASE":                                                         "decision (INSERT 'C' + commit)",
		"DELETE FROM tandem_decision WHERE outcome = 'C'":                                                                                               "decision table DELETE",
		"SELECT outcome FROM tandem_decision WHERE gtrid = 'a'":                                                                                         "decision table read",
		"XA END 'g','maria',1; XA PREPARE 'g','maria',1":                                                                                                "XA PREPARE",
		"XA END 'g'":                                              "XA END",
		"XA COMMIT 'g','b',1413566002 ONE PHASE":                  "XA COMMIT ONE PHASE",
		"XA COMMIT 'g','b',1":                                     "XA COMMIT",
		"xa start 'g'; insert into t values (1)":                  "XA START (+ statement)",
		"PREPARE TRANSACTION 'tandem2:g:pg:o'":                    "PREPARE TRANSACTION",
		"COMMIT PREPARED 'tandem2:g:pg:o'":                        "COMMIT PREPARED",
		"ROLLBACK PREPARED 'x'":                                   "ROLLBACK PREPARED",
		"SELECT gid FROM pg_prepared_xacts WHERE gid LIKE 'tan%'": "recover scan",
		"XA RECOVER":                          "recover scan",
		"COMMIT":                              "COMMIT",
		"INSERT INTO bench_t VALUES (1, 'x')": "INSERT (application)",
	} {
		if got := statementClass(q); got != want {
			t.Errorf("statementClass(%q) = %q, want %q", q, got, want)
		}
	}
	for _, c := range []struct{ state, typ, event, want string }{
		{"active", "", "", "CPU"}, {"active", "IO", "WALSync", "IO:WALSync"}, {"active", "Lock", "transactionid", "Lock:transactionid"},
		{"idle in transaction", "Client", "ClientRead", "idle in transaction (client)"},
	} {
		if got := pgWait(c.state, c.typ, c.event); got != c.want {
			t.Errorf("pgWait(%q, %q, %q) = %q, want %q", c.state, c.typ, c.event, got, c.want)
		}
	}
	for _, c := range []struct{ command, state, trx, want string }{
		{"Query", "Update", "LOCK WAIT", "InnoDB lock wait"}, {"Sleep", "", "RUNNING", "idle in transaction (client)"},
		{"Query", "Writing to binlog", "RUNNING", "Writing to binlog"}, {"Query", "", "", "running (no state)"},
	} {
		if got := myWait(c.command, c.state, c.trx); got != c.want {
			t.Errorf("myWait(%q, %q, %q) = %q, want %q", c.command, c.state, c.trx, got, c.want)
		}
	}
	rows := activityResults(map[activityKey]uint64{{"maria", "XA PREPARE", "Writing to binlog"}: 30, {"maria", "XA COMMIT", "starting"}: 10, {"pg", "COMMIT PREPARED", "IO:WALSync"}: 5},
		20*time.Millisecond, 100)
	if len(rows) != 3 || rows[0].Statement != "XA PREPARE" || rows[0].Share != 0.75 || rows[0].Seconds != 0.6 || rows[0].PerTxnMs != 6 || rows[2].RM != "pg" || rows[2].Share != 1 {
		t.Errorf("activityResults: %+v", rows)
	}
}
