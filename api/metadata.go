package api

// gRPC metadata of the Commit call, part of the contract with clients in
// other languages (README, "gRPC API"). All are optional: a client that
// sends nothing gets the plain unary behaviour.
const (
	// MetadataEarlyDecision, sent by the client with value "1" on a Commit
	// that lists a branch with client_settles, asks the coordinator to send
	// the decision in the response headers as soon as it is durable, before
	// phase 2 of its own branches: the client can then settle its
	// session-bound branches while the coordinator settles the others. The
	// response message still comes after phase 2, as visibility asks.
	MetadataEarlyDecision = "tandem-early-decision"
	// MetadataDecision is the response header that carries the early
	// decision: "COMMITTED" or "ABORTED". It is sent only once the decision
	// record is durable.
	MetadataDecision = "tandem-decision"
	// MetadataTrace, sent by the client with value "1" on a Commit, asks
	// the coordinator for its waits of that gtrid (a trace).
	MetadataTrace = "tandem-trace"
	// MetadataTraceTrailer is the trailer that answers MetadataTrace: the
	// coordinator's waits as JSON, a list of {"s": side, "e": event name,
	// "d": RM (optional), "t": start in Unix nanoseconds, "n": duration in
	// nanoseconds} (binary metadata: "-bin").
	MetadataTraceTrailer = "tandem-trace-bin"
	// MetadataNotPrimary is the trailer of a Commit, Abort or Status that a
	// coordinator refused because it is not the primary now: a standby, a
	// demoted or fenced primary, one that is stopping, or a primary handing
	// over in a switchover ("closing"). Its value is that role. Such a call
	// was refused before anything was written, so a client may send it to
	// the coordinator that serves (Health: serving) with no doubt about
	// this attempt. The refusal's code is FAILED_PRECONDITION, except
	// UNAVAILABLE from a primary handing over in a switchover.
	MetadataNotPrimary = "tandem-not-primary"
	// MetadataOwner, sent by the client on a Commit or an Abort, is the
	// owner its branches are named after (32 lowercase hex digits: the
	// cluster id Health named, package xid). A coordinator of another
	// cluster refuses the call with FAILED_PRECONDITION before anything is
	// written: its decision could never reach those branches (their names
	// are another cluster's), and the other cluster, finding them without a
	// decision, would roll them back — a COMMIT acknowledged and lost. A
	// call without it is a client from before owners existed.
	MetadataOwner = "tandem-owner"
	// MetadataMayTakeOver, sent by the client with value "1" on a Commit
	// under visibility ASYNC that lists a branch with client_settles, lets
	// the coordinator take those branches over when its async standby does
	// not hold a COMMIT at once (a slow or distant standby; never an ABORT):
	// instead of answering only once the standby holds it, the coordinator answers
	// COMMITTED as soon as the decision is durable in its own log, with
	// MetadataTakenOver, and settles the branches itself once the standby
	// holds the decision. The client must then end those branches' sessions
	// without settling them (each stays prepared in the database, and the
	// coordinator commits it from its own connection once the session is
	// gone).
	MetadataMayTakeOver = "tandem-may-take-over"
	// MetadataTakenOver is the response header, sent with MetadataDecision
	// (or, without the early decision, with the response), that says the
	// coordinator took the client-settled branches over: value "1". It is
	// sent on every Commit of a gtrid taken over, even one that did not
	// allow it: a client that gets it must not settle those branches.
	MetadataTakenOver = "tandem-taken-over"
	// MetadataClientSettlesAny is a header of the Health response, value
	// "1": this coordinator accepts client_settles on a branch of any
	// resource manager, not only a session-bound one. A client may then
	// settle every branch itself as soon as it has the early decision, as
	// raw 2PC would, instead of waiting for the coordinator's own phase 2:
	// the coordinator leaves such a branch to the client for a head start,
	// then checks that it is gone (a scan of the prepared branches) and
	// settles it itself if it is not. A coordinator without it refuses
	// client_settles on a branch that is not session-bound
	// (INVALID_ARGUMENT, before anything is written).
	MetadataClientSettlesAny = "tandem-client-settles-any"
)
