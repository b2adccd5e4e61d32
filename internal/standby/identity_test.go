package standby

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A data directory's identity records when its log was born: made at the
// first start, kept across restarts, and added (as now) to an identity
// written before births were recorded, which PrimaryIdentity says.
func TestPrimaryIdentityIsBornOnceAndKeepsIt(t *testing.T) {
	dir := t.TempDir()
	before := time.Now()
	id, bornNow, err := PrimaryIdentity(dir)
	if err != nil || !bornNow {
		t.Fatalf("first PrimaryIdentity: %+v bornNow=%v err=%v, want a new identity born now", id, bornNow, err)
	}
	if id.Cluster.IsZero() || id.Epoch != 1 || id.Born.Before(before) || id.Born.After(time.Now()) || !id.MadeWithLog() {
		t.Fatalf("new identity %+v: want a random cluster, epoch 1, born between %s and now", id, before)
	}
	again, bornNow, err := PrimaryIdentity(dir)
	if err != nil || bornNow || again.Cluster != id.Cluster || !again.Born.Equal(id.Born) || !again.MadeWithLog() {
		t.Fatalf("second PrimaryIdentity = %+v bornNow=%v err=%v, want %+v kept", again, bornNow, err, id)
	}

	// An identity from before births were recorded.
	old := t.TempDir()
	if err := os.WriteFile(filepath.Join(old, IdentityFile), []byte("cluster 0102030405060708090a0b0c0d0e0f10\nepoch 4\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, ok, err := LoadIdentity(old)
	if err != nil || !ok || !got.Born.IsZero() || got.Epoch != 4 {
		t.Fatalf("LoadIdentity of an identity without born = %+v %v %v", got, ok, err)
	}
	got, bornNow, err = PrimaryIdentity(old)
	if err != nil || !bornNow || got.Born.IsZero() || got.MadeWithLog() || got.Epoch != 4 || got.Cluster.String() != "0102030405060708090a0b0c0d0e0f10" {
		t.Fatalf("PrimaryIdentity of an identity without born = %+v bornNow=%v err=%v, want the same cluster and epoch, born now", got, bornNow, err)
	}
	reread, _, err := LoadIdentity(old)
	if err != nil || !reread.Born.Equal(got.Born) || reread.MadeWithLog() {
		t.Fatalf("the added birth was not saved: %+v %v", reread, err)
	}

	if err := os.WriteFile(filepath.Join(old, IdentityFile), []byte("cluster 0102030405060708090a0b0c0d0e0f10\nepoch 4\nborn yesterday\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadIdentity(old); err == nil {
		t.Fatal("LoadIdentity accepted a damaged born line")
	}
}

// WELCOME carries the cluster's birth; a WELCOME without it (a primary
// from before births were recorded) still decodes, with no birth.
func TestWelcomeCarriesBirthCompatibly(t *testing.T) {
	born := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	w := welcome{cluster: ClusterID{9}, epoch: 2, born: born.UnixNano(), made: born.UnixNano()}
	got, err := decodeWelcome(w.encode())
	if err != nil || got.born != born.UnixNano() || got.made != born.UnixNano() || got.cluster != w.cluster {
		t.Fatalf("decodeWelcome(encode) = %+v, %v; want born %d", got, err, born.UnixNano())
	}
	old := welcome{cluster: ClusterID{9}, epoch: 2}.encode()
	if len(old) != welcomeLen {
		t.Fatalf("a WELCOME without born is %d bytes, want the old length %d", len(old), welcomeLen)
	}
	got, err = decodeWelcome(old)
	if err != nil || got.born != 0 {
		t.Fatalf("decodeWelcome of the old form = %+v, %v", got, err)
	}
}
