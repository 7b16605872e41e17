// V8's heap, as the CLI's processes run: set on themselves, so that however a server is started (`npm
// start`, `npx mailroom serve`, a service manager) it runs so. V8 reads this flag at each collection, so
// setting it once the process runs takes effect (Node refuses it in NODE_OPTIONS).
//
// Allocation-site pretenuring: when objects made at one place in the code once survived young-generation
// collections at a high rate (a burst of requests in flight), V8 allocates that place's objects straight
// into the old generation from then on. On PostgreSQL that place was pg's parsing of result rows: every
// row of every page went to the old generation, about 0.7 MB a scavenge under a read load, and was left
// to full collections, so the heap grew to 100-125 MB between them (RSS 160-195 MiB). Without it, scavenges
// promote nothing under the same load, a scavenge takes 0.4 ms instead of 1.5, and the server held 131-136
// MiB (2026-11-29, 1M contacts, page 1 at 10 connections). Accepted emails and creates on SQLite cost the
// same CPU within the noise (bench:profile, alternating rounds).
import { setFlagsFromString } from 'node:v8';

setFlagsFromString('--no-allocation-site-pretenuring');
