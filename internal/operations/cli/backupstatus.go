package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rampart-io/rampart/api/v1alpha1"
)

// backupLateAfter is when a run overdue is flagged LATE: the alert
// RampartBackupLate's threshold, so status and the pager agree.
const backupLateAfter = 10 * time.Minute

// printBackups shows each Backup in Rampart's namespace (only those run):
// its schedule, last run and result, what that run holds, the next run,
// and what needs a look (not ready, failing, late).
func printBackups(ctx context.Context, w io.Writer, cl client.Client, namespace string, now time.Time) {
	var list v1alpha1.BackupList
	if err := cl.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		fmt.Fprintf(w, "(cannot list Backups: %v)\n", err)
		return
	}
	if len(list.Items) == 0 {
		fmt.Fprintf(w, "(none in %s: rampart backup create makes one now; a Backup object makes them on a schedule)\n", namespace)
		return
	}
	fmt.Fprintln(w, "NAME\tKIND\tSCHEDULE\tLAST RUN\tRESULT\tSIZE\tOBJECTS\tNEXT RUN\tATTENTION")
	for _, b := range list.Items {
		fmt.Fprintln(w, strings.Join(backupRow(b, now), "\t"))
	}
}

// backupRow is one Backup's line in rampart status, as of now.
func backupRow(b v1alpha1.Backup, now time.Time) []string {
	kind, schedule := "objects", "once"
	if b.Spec.EtcdSnapshot != nil {
		kind = "etcd"
	}
	if b.Spec.Schedule != "" {
		schedule = b.Spec.Schedule
	}
	last, result, bytes, objects := "never", "-", "-", "-"
	if r := b.Status.LastRun; r != nil {
		last = duration.HumanDuration(now.Sub(r.Started.Time)) + " ago"
		result = "Succeeded"
		if r.Error != "" {
			result = "Failed: " + shorten(r.Error, 80)
		}
	}
	// What the backup to restore holds: the last successful run.
	if r := b.Status.LastSuccessfulRun; r != nil {
		bytes = size(r.Size)
		objects = strconv.FormatInt(r.Objects, 10)
		if b.Spec.EtcdSnapshot != nil {
			objects = "rev " + strconv.FormatInt(r.Revision, 10)
		}
	}
	next := "-"
	var attention []string
	if t := b.Status.NextScheduleTime; t != nil {
		if d := t.Sub(now); d >= 0 {
			next = "in " + duration.HumanDuration(d)
		} else if -d < time.Minute {
			next = "due now" // a run takes a moment to start
		} else {
			next = duration.HumanDuration(-d) + " overdue"
			if -d > backupLateAfter {
				attention = append(attention, "LATE")
			}
		}
	}
	if b.Spec.Suspend {
		next = "suspended"
	}
	if c := meta.FindStatusCondition(b.Status.Conditions, "Ready"); c != nil && c.Status != "True" {
		attention = append(attention, "NOT READY ("+c.Reason+"): "+shorten(c.Message, 80))
	}
	if n := b.Status.ConsecutiveFailures; n > 0 {
		attention = append(attention, fmt.Sprintf("FAILING (%d in a row)", n))
	}
	if len(attention) == 0 {
		attention = []string{"-"}
	}
	return []string{b.Name, kind, schedule, last, result, bytes, objects, next, strings.Join(attention, "; ")}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
