package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tandem-tx/tandem/internal/standby"
)

// The role changes. Each holds roles.change from its first check to its
// end (role changes happen one at a time) and roles.mu only inside install;
// see roles.go.

// fence stops a primary that learnt of a newer epoch of its cluster: new
// calls are refused with err (which names the new primary), the shipper and
// the coordinator are closed (no phase 2, no in-doubt scan, no decision),
// and the server stays up to say so. It runs in the shipper's goroutine
// (ShipperConfig.OnFenced) or one of the controller's (the --peer check),
// and counts in the controller's goroutines so that Stop waits for it.
func (s *Server) fence(err error) {
	if !s.roles.tasks.enter() {
		return // stopping
	}
	defer s.roles.tasks.leave()
	s.roles.change.Lock()
	defer s.roles.change.Unlock()
	p, ok := s.current().(*primaryRole)
	if !ok || s.stopping() || p.shipper == nil {
		return
	}
	if peer := s.opts.Standby.Peer; peer != "" {
		// Name the new primary precisely when it is the configured peer;
		// and when the peer answers and is not newer, the claim (from a
		// peer that authenticated on --standby-listen) is not believed: a
		// running standby answers with its own epoch, so only a promoted
		// peer (or one that cannot be reached) confirms it.
		info, reached, perr := standby.CheckPeer(peer, p.shipper.Identity(), s.opts.Standby.Auth, time.Second)
		switch {
		case errors.Is(perr, standby.ErrFenced):
			err = perr
		case reached:
			s.logError("a peer claimed a newer epoch, but the configured --peer answers that it is not newer: not fenced", "claim", err, "peer", info)
			return
		}
	}
	s.logError("FENCED: another coordinator of this cluster was promoted; this one stops deciding and settling (it keeps answering, refusing every call)", "error", err)
	// The fenced role first, so that no new call reaches the primary; the
	// gate refuses those that already hold the primary's service.
	p.gate.close(status.Error(codes.FailedPrecondition, err.Error()))
	s.install(&idleRole{role: RoleFenced, why: err.Error(), id: p.shipper.Identity()})
	_ = p.close()
}

// Promote makes a running standby the primary (failover, or the second step
// of a switchover): it stops following, bumps the epoch in its data
// directory, opens its copy of the log as the primary's (replay, phase 2 of
// every unfinished COMMIT, the in-doubt scan), serves decisions, ships to a
// standby of its own on --standby-listen, and tells the old primary (best
// effort, in a goroutine of the new primary role) that it is superseded.
//
// A standby that is not synchronized with its primary is refused (the
// error wraps standby.ErrNotSynchronized) unless o.AcceptDataLoss: see
// standby.Promote. If the promotion itself fails the standby follows its
// primary again; if the new epoch was taken but the coordinator does not
// open, the server is RoleDemoted and says how to restart it.
func (s *Server) Promote(o standby.PromoteOptions) (standby.Identity, error) {
	s.roles.change.Lock()
	defer s.roles.change.Unlock()
	if s.stopping() {
		return standby.Identity{}, errStopped
	}
	sb, ok := s.current().(*standbyRole)
	if !ok {
		return standby.Identity{}, fmt.Errorf("%w: this coordinator is %s; only a standby can be promoted", ErrRole, s.current().kind())
	}
	old := sb.primary
	at := sb.receiver.Position()
	// Checked while the standby still follows (a refusal leaves it so):
	// closing the receiver below records "not synchronized", as any end of
	// the stream does.
	err := promotableWhileFollowing(s.cfg.DataDir, sb.receiver)
	switch {
	case err == nil:
		o.CheckedWhileFollowing = true
	case !o.AcceptDataLoss:
		return standby.Identity{}, fmt.Errorf("%w: promote refused: %w", ErrRole, err)
	case !o.OldPrimaryStopped:
		// The old primary may run on, cut off: go ahead only if it is
		// reached now (the new epoch then fences it).
		id, _, lerr := standby.LoadIdentity(s.cfg.DataDir)
		if lerr != nil {
			return standby.Identity{}, fmt.Errorf("promote: %w", lerr)
		}
		info, reached, _ := standby.CheckPeer(old, id, s.opts.Standby.Auth, time.Second)
		if !reached {
			return standby.Identity{}, fmt.Errorf("%w: promote refused: %w", ErrRole, standby.OldPrimaryMayRun("the old primary at "+old+" could not be reached: "+info))
		}
		o.OldPrimaryReached = true
	}
	// A primary with no standby listener refuses to open while this
	// directory owes a max-protection promise (standby/promise.go): found
	// now, before the epoch is taken, the standby goes on following.
	if s.opts.Standby.Listen == "" && !s.cfg.StandbyLost {
		if err := standby.CheckNoMaxProtectionPromise(s.cfg.DataDir); err != nil {
			return standby.Identity{}, fmt.Errorf("%w: promote refused: %w", ErrRole, err)
		}
	}
	// The receiver holds the log the primary opens: it closes first.
	if err := sb.close(); err != nil {
		s.logError("closing the standby's log before the promotion", "error", err)
	}
	id, err := standby.Promote(s.cfg.DataDir, o)
	if err != nil {
		next, ferr := s.newStandby(old, false)
		if ferr != nil {
			s.logError("could not follow the primary again after a failed promotion", "error", ferr)
			s.install(&idleRole{role: RoleDemoted,
				why: "a failed promotion left this standby stopped: restart it (tandem serve --standby-of " + old + ")"})
		} else {
			s.install(next)
		}
		return id, fmt.Errorf("promote: %w", err)
	}
	p, err := s.newPrimary()
	if err != nil {
		s.install(&idleRole{role: RoleDemoted, id: id,
			why: "the promotion to epoch " + fmt.Sprint(id.Epoch) + " could not open the coordinator: " + err.Error() + "; fix it and restart (tandem serve --data-dir " + s.cfg.DataDir + ")"})
		return id, fmt.Errorf("promote: epoch %d taken, but the coordinator did not open: %w", id.Epoch, err)
	}
	s.install(p)
	s.logInfo("PROMOTED: this coordinator is the primary now", "cluster", id.Cluster.String(), "epoch", id.Epoch, "copied_up_to", at.String(), "old_primary", old)
	p.tasks.run(func(ctx context.Context) { s.tellOldPrimary(ctx, old, id) })
	return id, nil
}

// finalStateWait bounds how long a promotion of a standby still connected
// to its primary waits for that primary's final STATE (promotableWhileFollowing).
const finalStateWait = 3 * time.Second

// promotableWhileFollowing reports whether the standby in dir, still
// following through r, may be promoted without losing what its primary
// acted on (nil), as standby.CheckPromotable and TrustedWhileFollowing
// judge it. A handover's final STATE is sent before the demotion answers,
// but the standby records it a moment later: a promotion sent as soon as
// the demotion answered (tandem switchover's step 2) would be refused in
// that moment. So while the session with the primary is still open and the
// answer is no, it looks again until the session ends (a primary that
// hands over closes it right after its final STATE) or finalStateWait has
// passed; then the answer stands.
func promotableWhileFollowing(dir string, r *standby.Receiver) error {
	deadline := time.Now().Add(finalStateWait)
	for {
		err := standby.CheckPromotable(dir)
		if err == nil {
			err = r.TrustedWhileFollowing()
		}
		if err == nil || !r.Status().Connected || time.Now().After(deadline) {
			return err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tellOldPrimary probes the old primary with the new epoch until it is
// reached (if it runs, it fences itself on this PROBE), 30 tries a second
// apart, or ctx ends.
func (s *Server) tellOldPrimary(ctx context.Context, old string, id standby.Identity) {
	for range 30 {
		info, reached, err := standby.CheckPeer(old, id, s.opts.Standby.Auth, time.Second)
		if reached {
			s.logInfo("told the old primary of the new epoch", "old_primary", old, "answer", info, "error", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	s.logInfo("the old primary was not reachable to be told of the new epoch (if it runs, its --peer check fences it)", "old_primary", old)
}

// Handover is where a demoted primary's log ended and whether the standby
// had all of it.
type Handover struct {
	Cluster   string `json:"cluster"`
	Epoch     uint64 `json:"epoch"`
	Position  string `json:"position"`   // the primary's last durable record
	StandbyAt string `json:"standby_at"` // the standby's acknowledged position (== Position)
}

// Demote is the first step of a switchover: the primary refuses new calls
// (UNAVAILABLE, retry on the new primary), waits for the calls in flight,
// closes its coordinator (no more decisions, phase 2 or in-doubt scans),
// and waits until its standby has acknowledged every record of its log.
// If any step fails, or ctx ends, it serves as the primary again and
// returns the error; otherwise it is RoleDemoted: Follow the promoted
// standby next, or Resume. The waits hold no lock readers need (Role,
// Health, GET /standby answer meanwhile: primary); Stop cancels them, and
// the primary is then not reopened.
func (s *Server) Demote(ctx context.Context) (Handover, error) {
	s.roles.change.Lock()
	defer s.roles.change.Unlock()
	if s.stopping() {
		return Handover{}, errStopped
	}
	p, ok := s.current().(*primaryRole)
	if !ok {
		return Handover{}, fmt.Errorf("%w: this coordinator is %s; only a primary can hand over", ErrRole, s.current().kind())
	}
	sh := p.shipper
	if sh == nil {
		return Handover{}, fmt.Errorf("%w: this primary has no standby (start it with --standby-listen, and a standby with --standby-of)", ErrRole)
	}
	if st := sh.Status(); !st.Connected {
		return Handover{}, errors.New("switchover refused: no standby is connected to this primary, so nothing could take over")
	} else if st.Transport == string(standby.Arch) {
		return Handover{}, errors.New("switchover refused: the arch transport ships only completed segments, so the standby can never have this primary's last records; switch over with sync or async (restart the primary with --transport sync or async)")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.roles.tasks.ctx, cancel)() // Stop
	idle := p.gate.close(status.Error(codes.Unavailable, "switchover in progress: this coordinator is handing over to its standby; retry against the new primary"))
	select {
	case <-idle:
	case <-ctx.Done():
		p.gate.reopen()
		return Handover{}, fmt.Errorf("switchover cancelled while waiting for the calls in flight: %w", ctx.Err())
	}
	s.setHandingOver(true)
	defer s.setHandingOver(false)
	id := sh.Identity()
	p.tasks.stop() // the --peer check: the handover decides now
	netTimeout := s.opts.Standby.NetTimeout
	if netTimeout <= 0 {
		netTimeout = standby.DefaultNetTimeout
	}
	released := s.closeCoordinatorShipping(ctx, p, 2*netTimeout)
	st, acked := waitAcknowledged(ctx, sh, released, 2*netTimeout)
	if !acked {
		_ = p.close()
		err := fmt.Errorf("switchover abandoned: the standby did not acknowledge this primary's last record %s (it has %s, connected %v) within %v",
			st.PrimaryAt, st.StandbyAt, st.Connected, 2*netTimeout)
		if s.stopping() {
			return Handover{}, fmt.Errorf("%w; the server is stopping", err)
		}
		// The new primary listens where this one did: this one is closed
		// first (above).
		next, rerr := s.newPrimary()
		if rerr != nil {
			s.install(&idleRole{role: RoleDemoted, id: id,
				why: "a switchover was abandoned and the primary could not reopen: " + rerr.Error() + "; restart it"})
			return Handover{}, fmt.Errorf("%w; and reopening the primary failed: %v", err, rerr)
		}
		s.install(next)
		return Handover{}, fmt.Errorf("%w; this coordinator serves as the primary again", err)
	}
	h := Handover{Cluster: id.Cluster.String(), Epoch: id.Epoch, Position: st.PrimaryAt, StandbyAt: st.StandbyAt}
	s.install(&idleRole{role: RoleDemoted, id: id, resumable: true,
		why: "switchover: this coordinator handed over (its standby has every record up to " + h.Position +
			"); it decides nothing: send calls to the new primary (or tandem switchover resumes it)"})
	_ = p.close()
	s.logInfo("DEMOTED: the standby has every record of this primary's log; waiting to follow the new primary", "position", h.Position)
	return h, nil
}

func (s *Server) setHandingOver(v bool) {
	s.roles.mu.Lock()
	s.roles.handingOver = v
	s.roles.mu.Unlock()
}

// closeCoordinatorShipping closes p's coordinator while its shipper still
// runs, so that the records of its last checkpoint reach the standby as
// well. A close stalled longer than wait (a sync flush the standby does
// not acknowledge), or ctx ending, closes the shipper to release it:
// released reports that (the standby cannot have everything then).
func (s *Server) closeCoordinatorShipping(ctx context.Context, p *primaryRole, wait time.Duration) (released bool) {
	closed := make(chan error, 1)
	go func() { closed <- p.coord.Close() }() // waited for below on every path
	t := time.NewTimer(wait)
	defer t.Stop()
	var err error
	select {
	case err = <-closed:
	case <-t.C:
		released = true
	case <-ctx.Done():
		released = true
	}
	if released {
		_ = p.shipper.Close()
		err = <-closed
	}
	p.coordClosed = true
	if err != nil {
		s.logError("switchover: closing the coordinator", "error", err)
	}
	return released
}

// waitAcknowledged waits until sh's standby has acknowledged every record
// (acked), for at most wait, until ctx ends, or not at all when the
// shipper was released. st is the last status seen.
func waitAcknowledged(ctx context.Context, sh *standby.Shipper, released bool, wait time.Duration) (st standby.Status, acked bool) {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		st = sh.Status()
		if released {
			return st, false
		}
		if st.Connected && st.LagRecords == 0 && st.StandbyAt == st.PrimaryAt {
			return st, true
		}
		select {
		case <-ctx.Done():
			return st, false
		case <-deadline.C:
			return st, false
		case <-tick.C:
		}
	}
}

// Resume makes a demoted coordinator the primary again (a switchover whose
// promotion failed).
func (s *Server) Resume() error {
	s.roles.change.Lock()
	defer s.roles.change.Unlock()
	if s.stopping() {
		return errStopped
	}
	if r, ok := s.current().(*idleRole); !ok || r.role != RoleDemoted || !r.resumable {
		return fmt.Errorf("%w: this coordinator is %s; only a primary demoted by a switchover resumes", ErrRole, s.current().kind())
	}
	p, err := s.newPrimary()
	if err != nil {
		return err
	}
	s.install(p)
	return nil
}

// Follow makes a demoted or fenced coordinator a standby of primary (the
// promoted one): its log and identity are moved aside (they are superseded:
// a demoted primary's standby has all of it; a fenced one's extra records
// were never the cluster's), and it copies the new primary's log from the
// start.
func (s *Server) Follow(primary string) error {
	s.roles.change.Lock()
	defer s.roles.change.Unlock()
	if s.stopping() {
		return errStopped
	}
	if k := s.current().kind(); k != RoleDemoted && k != RoleFenced {
		return fmt.Errorf("%w: this coordinator is %s; only a demoted or fenced one follows a new primary", ErrRole, k)
	}
	if primary == "" {
		return errors.New("follow: the new primary's --standby-listen address is required")
	}
	next, err := s.newStandby(primary, true)
	if err != nil {
		return fmt.Errorf("follow %s: %w", primary, err)
	}
	s.install(next)
	s.logInfo("following the new primary as its standby", "primary", primary)
	return nil
}
