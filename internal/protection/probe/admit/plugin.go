// Package admit is the Barrier's probe as a protection: a fresh webhook
// per version of the configuration, which tells when every API server
// has loaded it (the probe itself is the Barrier's, in
// internal/protection/admission/barrier.go).
package admit

import rampartadmission "github.com/rampart-io/rampart/internal/protection/admission"

// Plugin registers the probe webhook of the registration's token.
type Plugin struct{}

func (*Plugin) Name() string { return "probe" }

func (*Plugin) Routes() []rampartadmission.Route {
	return []rampartadmission.Route{{Path: rampartadmission.ProbePath, Handler: rampartadmission.Probe{}}}
}

func (*Plugin) Webhooks(reg rampartadmission.Registration, b rampartadmission.Builder) []rampartadmission.Webhook {
	if reg.Token == "" {
		return nil
	}
	return rampartadmission.Own(rampartadmission.Owner{}, rampartadmission.ProbeWebhook(reg, b))
}
