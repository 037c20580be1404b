package trafficprofile

import (
	_ "embed"
	"encoding/json"
	"html/template"
	"io"
)

//go:embed report.html
var reportHTML string

var reportTemplate = template.Must(template.New("report").Parse(reportHTML))

// chartClients is how many clients the rate chart draws.
const chartClients = 8

// WriteHTML writes a self-contained report: the top n clients' table and
// two charts drawn in the browser from the data inlined in the page (rate
// over time of the top clients, cost by resource). Nothing is fetched
// from the network.
func WriteHTML(w io.Writer, r Report, n int) error {
	type series struct {
		Name   string  `json:"name"`
		Kind   string  `json:"kind"`
		Points []int64 `json:"points"`
	}
	data := struct {
		SeriesStart   int64          `json:"seriesStart"`
		BucketSeconds int64          `json:"bucketSeconds"`
		Series        []series       `json:"series"`
		Resources     []ResourceCost `json:"resources"`
	}{SeriesStart: r.SeriesStart.Unix(), BucketSeconds: r.BucketSeconds}
	for i := range min(chartClients, len(r.Clients)) {
		c := &r.Clients[i]
		data.Series = append(data.Series, series{Name: c.Name(), Kind: c.Kind, Points: c.Series})
	}
	data.Resources = r.Resources[:min(15, len(r.Resources))]
	js, err := json.Marshal(data)
	if err != nil {
		return err
	}
	clients := r.Clients[:min(n, len(r.Clients))]
	return reportTemplate.Execute(w, struct {
		Report
		Top  []ClientProfile
		Data template.JS
	}{r, clients, template.JS(js)})
}
