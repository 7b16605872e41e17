// V8's heap, as the CLI's processes run: set by the process itself, so any way of starting a server gets it
// (Node refuses the flag in NODE_OPTIONS; V8 reads it at each collection, so setting it at run time works).
// No allocation-site pretenuring: once pg's parsed result rows survive young collections at a high rate (a
// burst of requests in flight), V8 would allocate them straight into the old generation, leaving every page's
// rows to full collections and the heap to grow between them. Without it scavenges promote nothing under a
// read load, and sends and creates cost the same CPU.
import { setFlagsFromString } from 'node:v8';

setFlagsFromString('--no-allocation-site-pretenuring');
