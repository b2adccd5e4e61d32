package client

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// fakePG is a PostgreSQL server on loopback, just enough for pgx and the
// SDK: the simple and extended protocols, BEGIN / COMMIT / ROLLBACK /
// PREPARE TRANSACTION with the server's transaction status, INSERT,
// one-column SELECTs, and failures on demand. It counts round trips (Sync
// and Query messages: each is answered by ReadyForQuery) and records
// every statement executed.
type fakePG struct {
	addr string
	mu   sync.Mutex
	// trips counts round trips; stmts the statements executed, in order.
	trips int
	stmts []string
	// fail: a statement containing it answers an error (and fails the
	// transaction). failLate: the error comes while reading its rows.
	fail, failLate string
}

func startFakePG(t testing.TB) *fakePG {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	f := &fakePG{addr: l.Addr().String()}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go f.serve(c)
		}
	}()
	return f
}

// conn connects pgx to the fake.
func (f *fakePG) conn(t *testing.T) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), "postgres://u@"+f.addr+"/db?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func (f *fakePG) counts() (int, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.trips, append([]string(nil), f.stmts...)
}

func (f *fakePG) reset() {
	f.mu.Lock()
	f.trips, f.stmts = 0, nil
	f.mu.Unlock()
}

// fakeSession is one connection's state.
type fakeSession struct {
	f      *fakePG
	be     *pgproto3.Backend
	status byte              // 'I', 'T' or 'E'
	wrote  bool              // the open transaction wrote
	stmts  map[string]string // prepared statement name → SQL
	portal string            // the bound statement's SQL
	binary bool              // the bound statement's results are asked in binary
	skip   bool              // an extended-protocol error: ignore until Sync
}

func (f *fakePG) serve(c net.Conn) {
	defer c.Close()
	s := &fakeSession{f: f, be: pgproto3.NewBackend(c, c), status: 'I', stmts: map[string]string{}}
	if _, err := s.be.ReceiveStartupMessage(); err != nil {
		return
	}
	s.be.Send(&pgproto3.AuthenticationOk{})
	s.be.Send(&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "on"})
	s.be.Send(&pgproto3.ParameterStatus{Name: "client_encoding", Value: "UTF8"})
	s.be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 2}})
	s.be.Send(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	if s.be.Flush() != nil {
		return
	}
	for {
		msg, err := s.be.Receive()
		if err != nil {
			return
		}
		switch m := msg.(type) {
		case *pgproto3.Query:
			f.mu.Lock()
			f.trips++
			f.mu.Unlock()
			for _, q := range strings.Split(m.String, ";") {
				if q = strings.TrimSpace(q); q == "" {
					continue
				}
				if !s.run(q, false, true) {
					break // the simple protocol skips the rest after an error
				}
			}
			s.be.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
		case *pgproto3.Parse:
			if !s.skip {
				s.stmts[m.Name] = m.Query
				s.be.Send(&pgproto3.ParseComplete{})
			}
		case *pgproto3.Describe:
			if !s.skip {
				q := s.portal
				if m.ObjectType == 'S' {
					q = s.stmts[m.Name]
					oids := make([]uint32, strings.Count(q, "$"))
					for i := range oids {
						oids[i] = 20 // int8
					}
					s.be.Send(&pgproto3.ParameterDescription{ParameterOIDs: oids})
				}
				if rd := rowDesc(q); rd != nil {
					s.be.Send(rd)
				} else {
					s.be.Send(&pgproto3.NoData{})
				}
			}
		case *pgproto3.Bind:
			if !s.skip {
				s.portal = s.stmts[m.PreparedStatement]
				s.binary = len(m.ResultFormatCodes) > 0 && m.ResultFormatCodes[0] == 1
				s.be.Send(&pgproto3.BindComplete{})
			}
		case *pgproto3.Execute:
			if !s.skip && !s.run(s.portal, s.binary, false) {
				s.skip = true
			}
		case *pgproto3.Sync:
			f.mu.Lock()
			f.trips++
			f.mu.Unlock()
			s.skip = false
			s.be.Send(&pgproto3.ReadyForQuery{TxStatus: s.status})
		case *pgproto3.Terminate:
			return
		}
		if s.be.Flush() != nil {
			return
		}
	}
}

// rowDesc describes a SELECT's one column: text for SHOW and concat_ws,
// bool for IS NULL, int8 otherwise; nil for a statement without rows.
func rowDesc(q string) *pgproto3.RowDescription {
	u := strings.ToUpper(q)
	if !strings.HasPrefix(u, "SELECT") && !strings.HasPrefix(u, "SHOW") {
		return nil
	}
	var oid uint32 = 20
	switch {
	case strings.HasPrefix(u, "SHOW"), strings.Contains(u, "CONCAT_WS"), strings.Contains(u, "GTRID"):
		oid = 25
	case strings.Contains(u, "IS NULL"):
		oid = 16
	}
	return &pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("c"), DataTypeOID: oid, DataTypeSize: -1, TypeModifier: -1}}}
}

// run executes one statement and sends its results (values in binary when
// asked; the simple protocol describes its rows first); false after an error.
func (s *fakeSession) run(q string, binary, simple bool) bool {
	f := s.f
	f.mu.Lock()
	f.stmts = append(f.stmts, q)
	fail := (f.fail != "" && strings.Contains(q, f.fail)) || (s.status == 'E' && !isTxEnd(q))
	failLate := f.failLate != "" && strings.Contains(q, f.failLate)
	f.mu.Unlock()
	u := strings.ToUpper(q)
	if fail {
		s.status = 'E'
		s.be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "23505", Message: "fake failure: " + q})
		return false
	}
	var tag string
	switch {
	case u == "BEGIN":
		s.status, s.wrote, tag = 'T', false, "BEGIN"
	case u == "COMMIT", u == "ROLLBACK":
		tag = u
		if s.status == 'E' {
			tag = "ROLLBACK"
		}
		s.status = 'I'
	case strings.HasPrefix(u, "PREPARE TRANSACTION"):
		tag = "PREPARE TRANSACTION"
		if s.status == 'E' {
			tag = "ROLLBACK" // what PostgreSQL answers for a failed transaction
		}
		s.status = 'I'
	case strings.HasPrefix(u, "COMMIT PREPARED"), strings.HasPrefix(u, "ROLLBACK PREPARED"):
		tag = strings.Join(strings.Fields(u)[:2], " ")
	case strings.HasPrefix(u, "INSERT"):
		s.wrote, tag = true, "INSERT 0 1"
	case strings.HasPrefix(u, "SET"):
		tag = "SET"
	default: // SELECT, SHOW: one row
		if simple {
			s.be.Send(rowDesc(q))
		}
		var v []byte
		switch rowDesc(q).Fields[0].DataTypeOID {
		case 16:
			v = []byte("f")
			if !s.wrote {
				v = []byte("t")
			}
			if binary {
				v = []byte{0}
				if !s.wrote {
					v = []byte{1}
				}
			}
		case 25:
			v = []byte("on")
		default:
			v = []byte("1")
			if binary {
				v = []byte{0, 0, 0, 0, 0, 0, 0, 1}
			}
		}
		if strings.Contains(u, "WHERE 1 = 0") {
			s.be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 0")})
			return true
		}
		s.be.Send(&pgproto3.DataRow{Values: [][]byte{v}})
		if failLate {
			s.status = 'E'
			s.be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: "22012", Message: "division by zero"})
			return false
		}
		tag = "SELECT 1"
	}
	s.be.Send(&pgproto3.CommandComplete{CommandTag: []byte(tag)})
	return true
}

func isTxEnd(q string) bool {
	u := strings.ToUpper(q)
	return u == "ROLLBACK" || u == "COMMIT" || strings.HasPrefix(u, "PREPARE TRANSACTION") || strings.HasPrefix(u, "ROLLBACK PREPARED")
}
