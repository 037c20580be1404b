package usage

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"
	"text/tabwriter"
)

// Formats are the output formats Write knows.
var Formats = []string{"table", "json", "folded", "html"}

// Write renders the report in one of Formats; rows bounds each table.
func Write(w io.Writer, r Report, format string, rows int) error {
	switch format {
	case "table", "":
		return writeTable(w, r, rows)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "folded":
		return writeFolded(w, r)
	case "html":
		return writeHTML(w, r)
	}
	return fmt.Errorf("unknown output %q: use one of %s", format, strings.Join(Formats, ", "))
}

// size prints bytes for people: 1023 B, 1.5 KiB, 2.0 GiB.
func size(b int64) string {
	const units = "KMGTPE"
	if b < 1024 {
		return fmt.Sprintf("%d B", b)
	}
	f, i := float64(b)/1024, 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, units[i])
}

func writeTable(w io.Writer, r Report, rows int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	history := "every revision kept"
	if !r.AllRevisions {
		history = "latest revision only (a live etcd's history is not listed; use a snapshot)"
	}
	fmt.Fprintf(w, "%s at revision %d: %d keys, %s latest; %d revisions, %s with history (%s)\n",
		r.Source, r.Revision, r.Total.Keys, size(r.Total.LatestBytes), r.Total.Revisions, size(r.Total.AllBytes), history)
	for _, t := range []struct {
		title  string
		groups []Group
	}{{"RESOURCE", r.Resources}, {"NAMESPACE", r.Namespaces}, {"PREFIX", r.Prefixes}} {
		fmt.Fprintln(w)
		fmt.Fprintf(tw, "%s\tKEYS\tLATEST\tREVISIONS\tALL REVISIONS\t\n", t.title)
		for i, g := range t.groups {
			if rows > 0 && i == rows {
				fmt.Fprintf(tw, "(%d more)\t\t\t\t\t\n", len(t.groups)-rows)
				break
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t\n", g.Name, g.Keys, size(g.LatestBytes), g.Revisions, size(g.AllBytes))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintf(tw, "LARGEST OBJECT\tBYTES\tREVISIONS\t\n")
	for _, o := range r.Largest {
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", o.Key, o.Bytes, o.Revisions)
	}
	return tw.Flush()
}

// writeFolded writes Brendan Gregg's folded stacks ("a;b;c 123"), the input
// of flamegraph.pl, speedscope and inferno. Frames cannot hold ';' or ' '.
func writeFolded(w io.Writer, r Report) error {
	clean := strings.NewReplacer(";", "_", " ", "_")
	for _, s := range r.Stacks {
		frames := make([]string, 0, len(s.Frames)+1)
		frames = append(frames, "etcd")
		for _, f := range s.Frames {
			frames = append(frames, clean.Replace(f))
		}
		if _, err := fmt.Fprintf(w, "%s %d\n", strings.Join(frames, ";"), s.Bytes); err != nil {
			return err
		}
	}
	return nil
}

// node is the flame graph's tree, embedded as JSON in the page.
type node struct {
	Name     string  `json:"n"`
	Bytes    int64   `json:"v"`
	Children []*node `json:"c,omitempty"`
}

func tree(r Report) *node {
	root := &node{Name: "etcd"}
	for _, s := range r.Stacks {
		cur := root
		cur.Bytes += s.Bytes
		for _, f := range s.Frames {
			var next *node
			for _, c := range cur.Children {
				if c.Name == f {
					next = c
					break
				}
			}
			if next == nil {
				next = &node{Name: f}
				cur.Children = append(cur.Children, next)
			}
			next.Bytes += s.Bytes
			cur = next
		}
	}
	return root
}

func writeHTML(w io.Writer, r Report) error {
	data, err := json.Marshal(tree(r))
	if err != nil {
		return err
	}
	return page.Execute(w, map[string]any{
		"Title": fmt.Sprintf("etcd usage: %s at revision %d", r.Source, r.Revision),
		"Summary": fmt.Sprintf("%d keys, %s latest; %d revisions, %s with history",
			r.Total.Keys, size(r.Total.LatestBytes), r.Total.Revisions, size(r.Total.AllBytes)),
		"Data": template.JS(data),
	})
}

// The page draws the flame graph itself (no network, no library): one row
// per level, widths by bytes, click a frame to zoom into it.
var page = template.Must(template.New("flame").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{{.Title}}</title>
<style>
body{font:13px sans-serif;margin:16px}
svg text{font:12px monospace;pointer-events:none}
svg rect{stroke:#fff;cursor:pointer}
#detail{height:1.4em;font-family:monospace}
</style></head>
<body>
<h1>{{.Title}}</h1>
<p id="summary">{{.Summary}}</p>
<p id="detail"></p>
<svg id="flame" width="1200" xmlns="http://www.w3.org/2000/svg"></svg>
<script>
const data = {{.Data}};
const svg = document.getElementById("flame");
const detail = document.getElementById("detail");
const W = 1200, H = 20, NS = "http://www.w3.org/2000/svg";
function human(b){const u=["B","KiB","MiB","GiB","TiB"];let i=0;while(b>=1024&&i<u.length-1){b/=1024;i++}return (i?b.toFixed(1):b)+" "+u[i]}
function depth(n){return 1+Math.max(0,...(n.c||[]).map(depth))}
function color(name){let h=0;for(const ch of name)h=(h*31+ch.charCodeAt(0))>>>0;return "hsl("+(h%60)+",80%,"+(55+h%15)+"%)"}
function draw(focus, path){
  while(svg.firstChild)svg.removeChild(svg.firstChild);
  const rows=path.length+depth(focus);
  svg.setAttribute("height",rows*H);
  const total=data.v||1;
  function frame(n,x,w,level,trail,leaf){
    const g=document.createElementNS(NS,"g");
    g.setAttribute("class","frame");
    g.setAttribute("data-name",n.n);
    const r=document.createElementNS(NS,"rect");
    r.setAttribute("x",x);r.setAttribute("y",(rows-level-1)*H);r.setAttribute("width",Math.max(w,0.5));r.setAttribute("height",H-1);
    r.setAttribute("fill",color(n.n));
    const t=document.createElementNS(NS,"title");
    const label=n.n+" — "+human(n.v)+" ("+(100*n.v/total).toFixed(1)+"%)";
    t.textContent=label;r.appendChild(t);g.appendChild(r);
    if(w>40){const tx=document.createElementNS(NS,"text");tx.setAttribute("x",x+3);tx.setAttribute("y",(rows-level-1)*H+14);
      tx.textContent=label.length*7>w?n.n.slice(0,Math.floor(w/7)-1)+"…":label;g.appendChild(tx)}
    r.addEventListener("mouseover",()=>{detail.textContent=label});
    r.addEventListener("click",()=>draw(n,trail));
    svg.appendChild(g);
    if(leaf)return;
    let cx=x;
    for(const c of (n.c||[]).slice().sort((a,b)=>a.n<b.n?-1:1)){const cw=n.v?w*c.v/n.v:0;frame(c,cx,cw,level+1,trail.concat([n]));cx+=cw}
  }
  path.forEach((p,i)=>frame(p,0,W,i,path.slice(0,i),true));
  frame(focus,0,W,path.length,path);
}
draw(data,[]);
</script>
</body></html>
`))
