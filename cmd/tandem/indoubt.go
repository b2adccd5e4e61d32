package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/tandem-tx/tandem/internal/coord"
)

// listInDoubt prints the primary's in-doubt branches (tandem status
// --in-doubt, tandem resolve without --gtrid): the prepared branches it
// never settles by itself, each with its owner, why, and its age.
func listInDoubt(ctx context.Context, ac *adminClient, admin string, stdout io.Writer) error {
	var out struct {
		InDoubt []coord.InDoubtBranch `json:"in_doubt"`
	}
	if err := ac.call(ctx, http.MethodGet, admin, "/in-doubt", &out); err != nil {
		return err
	}
	if len(out.InDoubt) == 0 {
		fmt.Fprintln(stdout, "no in-doubt branches")
		return nil
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
	return nil
}
