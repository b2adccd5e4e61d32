package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tandem-tx/tandem/internal/coord"
)

// listInDoubt prints the primary's in-doubt branches (tandem status
// --in-doubt, tandem resolve without --gtrid): the prepared branches it
// never settles by itself, each with its owner, why, and its age.
func listInDoubt(ctx context.Context, ac *adminClient, admin string, stdout io.Writer) error {
	var out coord.InDoubtListing
	if err := ac.call(ctx, http.MethodGet, admin, "/in-doubt", &out); err != nil {
		return err
	}
	defer func() { fmt.Fprintln(stdout, scanLine(out)) }()
	if len(out.InDoubt) == 0 {
		fmt.Fprintln(stdout, "no in-doubt branches")
		return inDoubtScanErr(out)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GTRID\tRM\tOWNER\tAGE\tWHY (prepared, never settled here by presumption)")
	for _, b := range out.InDoubt {
		why := b.Why
		if why == "" { // a coordinator from before owners: one reason only
			why = "began before an unsynchronized promotion"
		}
		owner := b.OwnerShort
		if owner == "" {
			owner = "-"
		}
		age := time.Duration(b.AgeSeconds * float64(time.Second)).Round(time.Second)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s (seen since %s)\n", b.GTRID, b.RM, owner, age, why, b.FirstSeen.UTC().Format(time.RFC3339))
	}
	tw.Flush()
	fmt.Fprintf(stdout, "%d in-doubt branches. A foreign owner's coordinator settles its own branches: start it again if it is gone. "+
		"Otherwise settle each gtrid by hand after looking at its data: tandem resolve --admin %s --gtrid G --commit|--abort\n", len(out.InDoubt), admin)
	return inDoubtScanErr(out)
}

// scanLine says which scan a listing is as of.
func scanLine(l coord.InDoubtListing) string {
	switch {
	case l.ScannedAt.IsZero():
		return "as of no scan: the coordinator has not finished one since it started; ask again"
	case !l.ScanComplete:
		return fmt.Sprintf("as of a scan that began at %s and could NOT read %s: their branches are missing or as an earlier scan saw them",
			l.ScannedAt.UTC().Format(time.RFC3339Nano), strings.Join(l.UnreadRMs, ", "))
	}
	return fmt.Sprintf("as of a scan of every database that began at %s", l.ScannedAt.UTC().Format(time.RFC3339Nano))
}

// inDoubtScanErr fails a listing whose scan could not read every resource
// manager: an incomplete list must not pass for "nothing in doubt" in a
// script. (A coordinator from before listings carried their scan sends
// no scanned_at: nothing to judge, no error.)
func inDoubtScanErr(l coord.InDoubtListing) error {
	if l.ScannedAt.IsZero() || l.ScanComplete {
		return nil
	}
	return fmt.Errorf("the in-doubt list is incomplete: the scan could not read %s (see the coordinator's log); ask again when it is reachable",
		strings.Join(l.UnreadRMs, ", "))
}
