package recyclebin

import (
	"fmt"

	"github.com/rampart-io/rampart/internal/plumbing/verdict"
	"github.com/rampart-io/rampart/internal/protection"
)

// RuleCapture names the recycle bin's rule in denials and metrics.
const RuleCapture = "recycle-bin-capture"

// CaptureRefused is the verdict on a delete of a kept object whose copy
// could not be stored: refused (fail closed), as 503 Service Unavailable
// (the garbage collector and the namespace controller retry it), naming
// what failed and both ways on: wait for the store, or take the object
// out of what is kept (lift) and delete it without a copy. No
// Retry-After: client-go would retry in silence for minutes before
// kubectl showed the message.
func CaptureRefused(o protection.Object, keptBy, lift string, err error) verdict.Verdict {
	return verdict.Verdict{
		Reason: RuleCapture,
		Message: fmt.Sprintf("%s is kept by %s: Rampart's recycle bin stores a copy before the delete is admitted, "+
			"and the copy could not be stored (%v), so the delete is refused: nothing kept is deleted without a copy. "+
			"Retry once the recycle bin's storage is back (kubectl rampart status shows it; the manager's log says why). %s",
			o.Describe(), keptBy, err, lift),
		Refusal: verdict.Unavailable,
	}
}
