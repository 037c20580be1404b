package trafficprofile

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteTable writes the top n clients as a table.
func WriteTable(w io.Writer, r Report, n int) error {
	fmt.Fprintf(w, "%d requests from %d clients over %.0fs (%s to %s), sorted by %s\n\n",
		r.Requests, len(r.Clients), r.Seconds, r.From.UTC().Format("15:04:05"), r.To.UTC().Format("15:04:05"), r.SortedBy)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tKIND\tREQUESTS\tPEAK/S\tLISTS\tLIST OBJECTS\tBYTES\tWATCHES\tSERVER S\tP50 MS\tP99 MS\t5XX\t429\tTOP VERB\tTOP RESOURCE")
	for i := range min(n, len(r.Clients)) {
		c := &r.Clients[i]
		objects := fmt.Sprint(c.ListObjects)
		if c.ListsUncounted > 0 {
			objects = fmt.Sprintf("%d (+%d uncounted)", c.ListObjects, c.ListsUncounted)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f%%\t%.1f%%\t%s\t%s\n",
			c.Name(), c.Kind, c.Requests, c.PeakPerSecond, c.Lists, objects, size(c.ResponseBytes), c.Watches, c.ServerSeconds,
			c.LatencyP50, c.LatencyP99, 100*c.ErrorRate, 100*c.ThrottledRate, top(c.ByVerb), top(c.ByResource))
	}
	return tw.Flush()
}

// top names the largest entry of m, ties broken by name.
func top(m map[string]int64) string {
	best, bestN := "", int64(-1)
	for k, n := range m {
		if n > bestN || n == bestN && k < best {
			best, bestN = k, n
		}
	}
	if bestN < 0 {
		return "-"
	}
	return fmt.Sprintf("%s %d", best, bestN)
}

// size is a byte count for people ("-" when the log shows none).
func size(b int64) string {
	switch {
	case b <= 0:
		return "-"
	case b < 1<<10:
		return fmt.Sprintf("%dB", b)
	case b < 1<<20:
		return fmt.Sprintf("%.1fKiB", float64(b)/(1<<10))
	case b < 1<<30:
		return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%.1fGiB", float64(b)/(1<<30))
}
