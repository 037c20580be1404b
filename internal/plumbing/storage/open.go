package storage

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// s3Params are the query parameters an s3:// location takes.
var s3Params = []string{"endpoint", "region", "pathStyle", "caFile", "credentialsFile", "profile"}

// Open opens the store that a flag's value names:
//
//   - a directory path (/var/lib/rampart/backups, ./backups): a Dir, its
//     folders made on the first Put;
//   - s3://BUCKET[/PREFIX][?PARAMS]: an S3-compatible bucket, the objects
//     under PREFIX/. Opening it checks that the bucket exists.
//
// The PARAMS, all optional:
//
//	endpoint=URL          the server, https://host[:port] or http://host[:port] (default: AWS S3)
//	region=NAME           the bucket's region (default: asked of the server)
//	pathStyle=true        address the bucket as ENDPOINT/BUCKET (MinIO, SeaweedFS, Ceph)
//	caFile=PATH           PEM CAs trusted for the endpoint besides the system's
//	credentialsFile=PATH  an AWS shared credentials file to read the credentials from
//	profile=NAME          its profile (default: AWS_PROFILE, else "default")
//
// For example:
//
//	s3://backups/rampart?endpoint=https://minio.example:9000&pathStyle=true&caFile=/etc/rampart/ca.crt
//
// The credentials come from credentialsFile when given, else from
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN), else
// from ~/.aws/credentials; never from the location, which shows in process
// lists and logs (errors repeat no more of it than s3://BUCKET/PREFIX).
func Open(ctx context.Context, location string) (Store, error) {
	if location == "" {
		return nil, errors.New("no store given: give a directory path or s3://BUCKET/PREFIX")
	}
	scheme, _, found := strings.Cut(location, "://")
	if !found {
		return Dir{Root: location}, nil
	}
	if scheme != "s3" {
		return nil, fmt.Errorf("store location: unknown scheme %s://; give a directory path or s3://BUCKET/PREFIX", scheme)
	}
	// Errors name the location only by bucket and prefix: the rest could
	// hold a secret put there by mistake.
	u, err := url.Parse(location)
	if err != nil {
		return nil, errors.New("store location: not a valid URL: give s3://BUCKET/PREFIX?PARAMS, with PARAMS escaped as in a URL")
	}
	short := "s3://" + u.Host + u.Path
	if u.User != nil {
		return nil, fmt.Errorf("store %s: credentials do not go in the location (it shows in process lists and logs): set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or credentialsFile=PATH", short)
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("store %s: its parameters are not a valid query: escape them as in a URL", short)
	}
	for _, p := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(s3Params, p) {
			return nil, fmt.Errorf("store %s: unknown parameter %q; the parameters are %s", short, p, strings.Join(s3Params, ", "))
		}
	}
	o := S3Options{
		Endpoint:        q.Get("endpoint"),
		Bucket:          u.Host,
		Prefix:          u.Path,
		Region:          q.Get("region"),
		CAFile:          q.Get("caFile"),
		CredentialsFile: q.Get("credentialsFile"),
		Profile:         q.Get("profile"),
	}
	if v := q.Get("pathStyle"); v != "" {
		if o.PathStyle, err = strconv.ParseBool(v); err != nil {
			return nil, fmt.Errorf("store %s: pathStyle=%s: give true or false", short, v)
		}
	}
	return NewS3(ctx, o)
}
