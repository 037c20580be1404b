package drill

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/rampart-io/rampart/internal/operations/apf"
	"github.com/rampart-io/rampart/internal/operations/trafficprofile"
)

// apfBurst is how long the storm runs before it is profiled.
const apfBurst = 3 * time.Second

// apfAdvice is what the advisor made of the burst.
type apfAdvice struct {
	// seats are the heavy-lists level's nominal seats on one API server;
	// isolated, the clients its flow schema matches.
	seats, isolated int
}

// adviseAPF runs the storm for apfBurst straight at the API server, reads
// the API server's audit log of it, has the advisor suggest API Priority
// and Fairness objects from that profile (apf.Suggest, 20% margin, the
// level capped for a storm: `rampart traffic profile --suggest apf
// --heavy-level-seats 3`), applies them and waits
// until the API server has taken them up. undo deletes them.
func (t Target) adviseAPF(ctx context.Context, issue func(string) (*rest.Config, error), stormUser func(int) string) (apfAdvice, func(), error) {
	var a apfAdvice
	undo := func() {}
	since := time.Now()
	burst, stop := context.WithTimeout(ctx, apfBurst)
	var wg sync.WaitGroup
	counts := &stormCounts{}
	for i := range stormClients {
		cfg, err := issue(stormUser(i))
		if err != nil {
			stop()
			return a, undo, err
		}
		wg.Go(func() { counts.client(burst, cfg) })
	}
	wg.Wait()
	stop()
	// The API server writes an event once its request ends.
	time.Sleep(time.Second)
	p := trafficprofile.NewProfiler()
	f, err := os.Open(filepath.Join(t.Local.Dir, "audit.log"))
	if err != nil {
		return a, undo, err
	}
	_, err = trafficprofile.Read(f, "audit.log", 0, func(e *trafficprofile.Entry) {
		if e.Time.After(since) {
			p.Add(e)
		}
	})
	f.Close()
	if err != nil {
		return a, undo, fmt.Errorf("reading the audit log: %w", err)
	}
	report, err := p.Report("requests")
	if err != nil {
		return a, undo, err
	}
	// The profile is of the storm: the level is capped as an operator
	// profiling an incident would (--heavy-level-seats 3).
	s := apf.Suggest(report, apf.SuggestOptions{Margin: 0.2, Prefix: t.Prefix + "-apf", HeavyLevelSeats: apf.StormHeavyLevelSeats})
	fc := t.Client.FlowcontrolV1()
	var levels, schemas []string
	undo = func() {
		for _, n := range schemas {
			_ = fc.FlowSchemas().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
		for _, n := range levels {
			_ = fc.PriorityLevelConfigurations().Delete(context.Background(), n, metav1.DeleteOptions{})
		}
	}
	for _, l := range s.Levels {
		if _, err := fc.PriorityLevelConfigurations().Create(ctx, l, metav1.CreateOptions{}); err != nil {
			return a, undo, fmt.Errorf("the suggested level %s: %w", l.Name, err)
		}
		levels = append(levels, l.Name)
	}
	for _, fs := range s.Schemas {
		if _, err := fc.FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil {
			return a, undo, fmt.Errorf("the suggested flow schema %s: %w", fs.Name, err)
		}
		schemas = append(schemas, fs.Name)
	}
	if len(s.Schemas) == 0 {
		return a, undo, fmt.Errorf("the advisor suggested nothing for the storm's burst (%d LISTs): %v", counts.served.Load(), s.Notes)
	}
	cfg := apf.Builtin()
	cfg.Add(s.Schemas, s.Levels)
	a.seats = cfg.NominalSeats(apf.DefaultServerSeats)[s.Levels[0].Name]
	a.isolated = len(s.Schemas[0].Spec.Rules[0].Subjects)
	// Taken up: the API server's APF controller marks a schema whose
	// level exists not Dangling.
	err = poll(ctx, 30*time.Second, func(ctx context.Context) (bool, error) {
		for _, n := range schemas {
			got, err := fc.FlowSchemas().Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			taken := false
			for _, c := range got.Status.Conditions {
				taken = taken || c.Type == flowcontrolv1.FlowSchemaConditionDangling && c.Status == flowcontrolv1.ConditionFalse
			}
			if !taken {
				return false, nil
			}
		}
		return true, nil
	})
	return a, undo, err
}
