package cli

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/rampart-io/rampart/internal/operations/apf"
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
		suggest        string
		gateways       []string
		serverSeats    int
		heavyListSeats int64
		heavyLevel     int64
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

A client is the user the API server authorised: a request sent through an
impersonating proxy (kubectl --as, Teleport, Rampart's gateway) is its
impersonated user's, shown "via PROXY".

--suggest (or --suggest=trafficpolicy) writes TrafficPolicies instead of
the table: each client (not the control plane's, which is exempted)
limited to its peak plus --margin, and clients the profile did not see to
the largest such limit; a client behind a proxy is matched as the gateway
sees it (the proxy, narrowed by match[].impersonated), unless the proxy is
a Rampart gateway (--gateway-user). Size them from a calm period with
--baseline-until, then replay the whole log with 'rampart traffic check'
to see who they would have refused.

--suggest=apf writes FlowSchemas and PriorityLevelConfigurations for the
API server's own API Priority and Fairness: the LISTs of heavy listers
(whose LISTs held --heavy-list-seats or more seats at once) on a level of
their own sized from their peak plus --margin, at most --heavy-level-seats,
queued fairly by user (profiling a LIST storm rather than calm traffic,
cap it: --heavy-level-seats 3 runs three LISTs at a time); the
control plane, nodes and leases left on the built-in levels, which already
serve them; the other clients fair-shared by user on the built-in levels
unless they needed more seats than global-default has. Replay a log
against them with 'rampart traffic check --apf FILE LOG'.`,
		Example: `  rampart traffic profile /var/log/kube-apiserver/audit.log --html profile.html
  rampart traffic profile audit.log -o json | jq '.clients[0]'
  rampart traffic profile audit.log --suggest --baseline-until 2026-11-23T22:00:00Z > policies.yaml
  rampart traffic check policies.yaml audit.log
  rampart traffic profile audit.log --suggest=apf > apf.yaml
  rampart traffic check --apf apf.yaml audit.log`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			if output != "table" && output != "json" {
				return fmt.Errorf("-o %q: use table or json", output)
			}
			// "--suggest apf" (with a space) leaves apf as an argument,
			// since --suggest alone means trafficpolicy: take it back.
			if suggest != "" {
				for i, f := range files {
					if _, err := os.Stat(f); err != nil && (f == suggestAPF || f == suggestTrafficPolicy) {
						suggest, files = f, slices.Delete(slices.Clone(files), i, i+1)
						break
					}
				}
				if len(files) == 0 {
					return errors.New("no log to profile: rampart traffic profile FILE... --suggest=apf")
				}
			}
			if suggest != "" && suggest != suggestAPF && suggest != suggestTrafficPolicy {
				return fmt.Errorf("--suggest %q: use --suggest=%s (TrafficPolicies for Rampart's gateway) or --suggest=%s (FlowSchemas and PriorityLevelConfigurations)", suggest, suggestTrafficPolicy, suggestAPF)
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
			if suggest != "" {
				sized := r
				if !baseEnd.IsZero() {
					if sized, err = baseline.Report(sortBy); err != nil {
						return err
					}
					if len(sized.Clients) == 0 {
						return fmt.Errorf("--baseline-until %s: no request was received before it (the logs start at %s)", baselineUntil, r.From.UTC().Format(time.RFC3339))
					}
				}
				if suggest == suggestAPF {
					return apf.Write(out, apf.Suggest(sized, apf.SuggestOptions{Margin: margin, ServerSeats: serverSeats, HeavyListSeats: heavyListSeats, HeavyLevelSeats: heavyLevel}))
				}
				return trafficprofile.WritePolicies(out, trafficprofile.Suggest(sized, trafficprofile.SuggestOptions{Margin: margin, Gateways: gateways}))
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
	cmd.Flags().StringVar(&suggest, "suggest", "", "write objects sized from the profile (YAML) instead of the table: "+suggestTrafficPolicy+" (TrafficPolicies, the default of --suggest alone) or "+suggestAPF+" (FlowSchemas and PriorityLevelConfigurations)")
	cmd.Flags().Lookup("suggest").NoOptDefVal = suggestTrafficPolicy
	cmd.Flags().StringSliceVar(&gateways, "gateway-user", nil, "with --suggest: users Rampart's gateways reach the API server as (they impersonate every client; their policies see the client itself)")
	cmd.Flags().IntVar(&serverSeats, "server-seats", apf.DefaultServerSeats, "with --suggest=apf: one API server's --max-requests-inflight plus --max-mutating-requests-inflight")
	cmd.Flags().Int64Var(&heavyListSeats, "heavy-list-seats", 3, "with --suggest=apf: a client whose LISTs held this many APF seats at once (one per 100 objects) is isolated")
	cmd.Flags().Int64Var(&heavyLevel, "heavy-level-seats", 0, "with --suggest=apf: the heavy listers' level at most, in APF seats (0: half the server); in a level of a few seats each LIST holds one, so it is the LISTs run at once")
	cmd.Flags().Float64Var(&margin, "margin", 0.2, "with --suggest: added to each observed peak (0.2 is 20%)")
	cmd.Flags().StringVar(&baselineUntil, "baseline-until", "", "with --suggest: size policies from the requests received before this time (RFC 3339) only")
	cmd.Flags().StringVar(&since, "since", "", "profile only requests received at or after this time (RFC 3339), e.g. an incident's start")
	cmd.Flags().StringVar(&until, "until", "", "profile only requests received before this time (RFC 3339)")
	cmd.Flags().IntVar(&workers, "workers", 0, "goroutines decoding lines (0: one per CPU)")
	return cmd
}

func newTrafficCheckCommand() *cobra.Command {
	var (
		output, apfFile string
		serverSeats     int
	)
	cmd := &cobra.Command{
		Use:   "check POLICIES FILE... | check --apf APF FILE...",
		Short: "Replay logs against TrafficPolicies (who would have been refused) or against APF objects (who would have been queued or rejected)",
		Long: `check replays audit logs or the gateway's traffic log against the
TrafficPolicies in POLICIES (YAML, several documents) with the gateway's own
decisions (policy selection, the token buckets and in-flight limits, the
LIST and watch guards), each request judged at the time it was received.
It is a dry run before applying limits. Every logged request is judged as
if it had been sent (a refused client would have backed off); the circuit
breaker is not replayed; LIST object budgets are only charged where the log
counts objects (traffic log, audit level Response).

With --apf APF, it replays the logs through API Priority and Fairness with
the FlowSchemas and PriorityLevelConfigurations in APF added to the ones
every API server holds (same names replace them): which flow schema each
client's requests match, and what the priority levels would have queued or
rejected. What it models: one API server of --server-seats seats shared by
the levels' nominalConcurrencyShares (no borrowing between levels); each
request holding APF's seats (a LIST one per 100 objects it returned, up to
10) for its logged latency; a full level queuing on the shortest of its
flow's handSize queues, rejecting when that queue is full or after 15 s of
waiting; freed seats served round robin over the queues. A log is one API
server's traffic: replay each server's own.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("-o %q: use text or json", output)
			}
			encode := func(v any) error {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			if apfFile != "" {
				data, err := os.ReadFile(apfFile)
				if err != nil {
					return err
				}
				schemas, levels, err := apf.ReadObjects(data, apfFile)
				if err != nil {
					return err
				}
				cfg := apf.Builtin()
				cfg.Add(schemas, levels)
				rp := apf.NewReplay(cfg, serverSeats)
				for _, f := range args {
					if _, err := readLog(f, 0, rp.Add); err != nil {
						return err
					}
				}
				res := rp.Result()
				if output == "json" {
					return encode(res)
				}
				apf.WriteReplay(cmd.OutOrStdout(), res)
				return nil
			}
			if len(args) < 2 {
				return errors.New("check POLICIES FILE...: name the TrafficPolicies and at least one log (or --apf APF FILE...)")
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
				return encode(res)
			}
			trafficprofile.WriteReplay(cmd.OutOrStdout(), res)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "text or json")
	cmd.Flags().StringVar(&apfFile, "apf", "", "replay through API Priority and Fairness with the FlowSchemas and PriorityLevelConfigurations of this file (as --suggest=apf writes them)")
	cmd.Flags().IntVar(&serverSeats, "server-seats", apf.DefaultServerSeats, "with --apf: one API server's --max-requests-inflight plus --max-mutating-requests-inflight")
	return cmd
}

// The values of --suggest.
const (
	suggestTrafficPolicy = "trafficpolicy"
	suggestAPF           = "apf"
)

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
