package cli

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rampart-io/rampart/internal/operations/trafficprofile"
)

func newTrafficCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "traffic",
		Short: "Profile the API server's clients from audit logs and the gateway's traffic log, and size TrafficPolicies from them",
	}
	cmd.AddCommand(newTrafficProfileCommand(), newTrafficCheckCommand())
	return cmd
}

func newTrafficProfileCommand() *cobra.Command {
	var (
		top, workers   int
		output, sortBy string
		htmlPath       string
		suggest        bool
		margin         float64
		baselineUntil  string
		since, until   string
	)
	cmd := &cobra.Command{
		Use:   "profile FILE...",
		Short: "Profile each client (user and user agent) of kube-apiserver audit logs or the gateway's traffic log",
		Long: `profile reads kube-apiserver audit logs (audit.k8s.io/v1 Events, one JSON
line each, at any level; FILE.gz is read compressed; - is stdin) and the
gateway's traffic log, streaming: memory depends on the clients, not on
the size of the logs. For each client it reports requests per second over
time and at peak, by verb and resource; LISTs and their objects (the
traffic log counts them, an audit log at level Response or RequestResponse
shows them; at level Metadata they are uncounted); the bytes of its
answers and the events of its watches (traffic log); watches; 5xx and 429
rates; p50 and p99 latency of short requests (a streaming quantile sketch);
and the seconds the API server spent answering it, which ranks clients by
load when objects are uncounted.

--suggest writes TrafficPolicies instead of the table: each client (not
the control plane's, which is exempted) limited to its peak plus --margin,
and clients the profile did not see to the largest such limit. Size them
from a calm period with --baseline-until, then replay the whole log with
'rampart traffic check' to see who they would have refused.`,
		Example: `  rampart traffic profile /var/log/kube-apiserver/audit.log --html profile.html
  rampart traffic profile audit.log -o json | jq '.clients[0]'
  rampart traffic profile audit.log --suggest --baseline-until 2026-11-23T22:00:00Z > policies.yaml
  rampart traffic check policies.yaml audit.log`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: use table or json", output)
			}
			if margin < 0 {
				return fmt.Errorf("--margin %g: a margin is 0 or more (0.2 is 20%%)", margin)
			}
			baseEnd, err := parseTimeFlag("baseline-until", baselineUntil)
			if err != nil {
				return err
			}
			from, err := parseTimeFlag("since", since)
			if err != nil {
				return err
			}
			to, err := parseTimeFlag("until", until)
			if err != nil {
				return err
			}
			all, baseline := trafficprofile.NewProfiler(), trafficprofile.NewProfiler()
			var read trafficprofile.Stats
			for _, f := range files {
				st, err := readLog(f, workers, func(e *trafficprofile.Entry) {
					if !from.IsZero() && e.Time.Before(from) || !to.IsZero() && !e.Time.Before(to) {
						return
					}
					all.Add(e)
					if !baseEnd.IsZero() && e.Time.Before(baseEnd) {
						baseline.Add(e)
					}
				})
				if err != nil {
					return err
				}
				read = addStats(read, st)
			}
			r, err := all.Report(sortBy)
			if err != nil {
				return err
			}
			r.Files, r.Read = files, read
			if read.Malformed > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "warning: %d lines were neither audit events nor traffic records, skipped (first: %s)\n", read.Malformed, read.FirstMalformed)
			}
			if htmlPath != "" {
				if err := writeFile(htmlPath, func(w io.Writer) error { return trafficprofile.WriteHTML(w, r, top) }); err != nil {
					return err
				}
			}
			out := cmd.OutOrStdout()
			if suggest {
				sized := r
				if !baseEnd.IsZero() {
					if sized, err = baseline.Report(sortBy); err != nil {
						return err
					}
					if len(sized.Clients) == 0 {
						return fmt.Errorf("--baseline-until %s: no request was received before it (the logs start at %s)", baselineUntil, r.From.UTC().Format(time.RFC3339))
					}
				}
				return trafficprofile.WritePolicies(out, trafficprofile.Suggest(sized, trafficprofile.SuggestOptions{Margin: margin}))
			}
			if output == "json" {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			return trafficprofile.WriteTable(out, r, top)
		},
	}
	cmd.Flags().IntVar(&top, "top", 20, "clients in the table and the HTML report")
	cmd.Flags().StringVarP(&output, "output", "o", "table", "table or json (json: every client)")
	cmd.Flags().StringVar(&sortBy, "sort", "server-time", "order of clients: "+strings.Join(trafficprofile.SortKeys, ", "))
	cmd.Flags().StringVar(&htmlPath, "html", "", "also write a self-contained HTML report (charts drawn in the browser, nothing fetched) to this file")
	cmd.Flags().BoolVar(&suggest, "suggest", false, "write TrafficPolicies sized from the profile (YAML) instead of the table")
	cmd.Flags().Float64Var(&margin, "margin", 0.2, "with --suggest: added to each observed peak (0.2 is 20%)")
	cmd.Flags().StringVar(&baselineUntil, "baseline-until", "", "with --suggest: size policies from the requests received before this time (RFC 3339) only")
	cmd.Flags().StringVar(&since, "since", "", "profile only requests received at or after this time (RFC 3339), e.g. an incident's start")
	cmd.Flags().StringVar(&until, "until", "", "profile only requests received before this time (RFC 3339)")
	cmd.Flags().IntVar(&workers, "workers", 0, "goroutines decoding lines (0: one per CPU)")
	return cmd
}

func newTrafficCheckCommand() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "check POLICIES FILE...",
		Short: "Replay logs against TrafficPolicies: who would have been refused, how often and when",
		Long: `check replays audit logs or the gateway's traffic log against the
TrafficPolicies in POLICIES (YAML, several documents) with the gateway's own
decisions (policy selection, the token buckets and in-flight limits, the
LIST and watch guards), each request judged at the time it was received.
It is a dry run before applying limits. Every logged request is judged as
if it had been sent (a refused client would have backed off); the circuit
breaker is not replayed; LIST object budgets are only charged where the log
counts objects (traffic log, audit level Response).`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: use text or json", output)
			}
			data, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			policies, err := trafficprofile.ReadPolicies(data, args[0])
			if err != nil {
				return err
			}
			rp := trafficprofile.NewReplay(policies)
			for _, f := range args[1:] {
				if _, err := readLog(f, 0, rp.Add); err != nil {
					return err
				}
			}
			res := rp.Result()
			if output == "json" {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(res)
			}
			trafficprofile.WriteReplay(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	return cmd
}

func parseTimeFlag(name, value string) (time.Time, error) {
	if value == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, value)
	if err != nil {
		return time.Time{}, fmt.Errorf("--%s %q: an RFC 3339 time, e.g. 2026-11-23T22:00:00Z", name, value)
	}
	return t, nil
}

// readLog reads one log file ("-" is stdin, NAME.gz is decompressed).
func readLog(name string, workers int, fn func(*trafficprofile.Entry)) (trafficprofile.Stats, error) {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return trafficprofile.Stats{}, err
		}
		defer f.Close()
		r = f
	}
	if strings.HasSuffix(name, ".gz") {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return trafficprofile.Stats{}, fmt.Errorf("%s: %w", name, err)
		}
		defer gz.Close()
		r = gz
	}
	return trafficprofile.Read(r, name, workers, fn)
}

func addStats(a, b trafficprofile.Stats) trafficprofile.Stats {
	if a.FirstMalformed == "" {
		a.FirstMalformed = b.FirstMalformed
	}
	a.Bytes += b.Bytes
	a.Lines += b.Lines
	a.Requests += b.Requests
	a.OtherStages += b.OtherStages
	a.Malformed += b.Malformed
	return a
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
