package coord

import (
	"sync"
	"time"
)

// Phase-2 retries, bounded (docs/architecture.md, "The commit path": an RM
// down for an hour under load).
//
// A branch that its resource manager does not acknowledge on the first
// attempt is parked in that RM's retryQueue: one goroutine per RM, at most
// retryConcurrency calls at once, whatever the backlog. Each branch backs
// off on its own (phase2FirstBackoff doubling to phase2MaxBackoff). The RM
// has a circuit breaker: when a round of retries fails and none succeeds,
// it opens; while open, one parked branch is tried per interval (the
// probe), the interval doubling from breakerFirst to breakerMax. An answer
// (to the probe, or to a new transaction's first attempt, which is always
// made) closes it, and every due branch is retried. So an RM that is down
// costs one call per new transaction and one per interval for the backlog,
// and memory per unfinished transaction (bounded by the log's admission
// control), not a goroutine and a timer each.
const (
	retryConcurrency = 16
	breakerFirst     = 100 * time.Millisecond
	breakerMax       = 10 * time.Second
)

// parked is a branch waiting in a retry queue.
type parked struct {
	t         *txn
	b         *branchProgress
	recovered bool
	scanSince time.Time // the oldest recover scan that can confirm this branch
	next      time.Time // not retried before this
	backoff   time.Duration
	spanned   int // attempts traced (tracing.go); attempts at one branch never overlap
}

// retryQueue retries one resource manager's unacknowledged branches.
type retryQueue struct {
	c    *Coordinator
	wake chan struct{} // a branch was parked

	mu        sync.Mutex
	items     []*parked
	open      bool // the breaker: the RM failed every attempt of the last round
	interval  time.Duration
	openUntil time.Time
}

func newRetryQueue(c *Coordinator) *retryQueue {
	return &retryQueue{c: c, wake: make(chan struct{}, 1)}
}

// push parks p.
func (q *retryQueue) push(p *parked) {
	q.mu.Lock()
	q.items = append(q.items, p)
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// answered closes the breaker: the RM answered a first attempt. Parked
// branches that are due are retried at once.
func (q *retryQueue) answered() {
	q.mu.Lock()
	wasOpen := q.open
	q.open, q.interval = false, 0
	q.mu.Unlock()
	if wasOpen {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
}

// run retries parked branches until the coordinator closes.
func (q *retryQueue) run() {
	defer q.c.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, wait := q.take(time.Now())
		if len(due) > 0 {
			q.retry(due)
			continue
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		select {
		case <-q.c.ctx.Done():
			return
		case <-q.wake:
		case <-timer.C:
		}
	}
}

// take removes the branches to try now — with the breaker open, the one
// due first once the interval has passed (the probe); closed, every due
// one — or says how long to wait.
func (q *retryQueue) take(now time.Time) ([]*parked, time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil, time.Hour
	}
	if q.open {
		if now.Before(q.openUntil) {
			return nil, q.openUntil.Sub(now)
		}
		first := 0
		for i, p := range q.items {
			if p.next.Before(q.items[first].next) {
				first = i
			}
		}
		p := q.items[first]
		q.items = append(q.items[:first], q.items[first+1:]...)
		return []*parked{p}, 0
	}
	var due []*parked
	keep := q.items[:0]
	wait := time.Hour
	for _, p := range q.items {
		if !p.next.After(now) {
			due = append(due, p)
		} else {
			keep = append(keep, p)
			wait = min(wait, p.next.Sub(now))
		}
	}
	clear(q.items[len(keep):])
	q.items = keep
	return due, wait
}

// retry makes one attempt at each of due, retryConcurrency at a time, and
// sets the breaker from the outcome.
func (q *retryQueue) retry(due []*parked) {
	results := make([]attemptResult, len(due))
	sem := make(chan struct{}, retryConcurrency)
	var wg sync.WaitGroup
	for i, p := range due {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = q.c.attempt(p, true)
		}()
	}
	wg.Wait()
	if q.c.ctx.Err() != nil {
		return // closing: the next Open drives what is left
	}
	answered, failed := false, false
	now := time.Now()
	for i, p := range due {
		switch results[i] {
		case attemptSettled:
			answered = true
			q.c.unpark(p)
			continue
		case attemptHeld:
			answered = true
		case attemptFailed:
			failed = true
		}
		p.backoff = min(2*p.backoff, phase2MaxBackoff)
		p.next = now.Add(p.backoff)
		q.mu.Lock()
		q.items = append(q.items, p)
		q.mu.Unlock()
	}
	q.mu.Lock()
	switch {
	case answered:
		q.open, q.interval = false, 0
	case failed:
		q.open = true
		q.interval = min(max(2*q.interval, breakerFirst), breakerMax)
		q.openUntil = now.Add(q.interval)
	}
	q.mu.Unlock()
}

// unpark takes note that a parked branch settled: the transaction is
// driven again if a branch appeared meanwhile, or ends if it was the last.
func (c *Coordinator) unpark(p *parked) {
	c.mu.Lock()
	p.b.parked = false
	t := p.t
	again := false
	for _, b := range t.branches {
		if b.state == BranchPending && !b.parked {
			again = true
		}
	}
	if again {
		c.startPhase2Locked(t, p.recovered)
	}
	c.mu.Unlock()
	if !again {
		c.endIfSettled(t)
	}
}
