// `node --import ./dual-localhost.mjs …`: `localhost` resolves to 127.0.0.1 and ::1, as in Docker's
// /etc/hosts, on a machine whose own resolver may give only one of them.
import dns from 'node:dns';

const lookup = dns.lookup;
dns.lookup = function (host, options, callback) {
  if (typeof options === 'function') [callback, options] = [options, {}];
  if (host !== 'localhost') return lookup.call(this, host, options, callback);
  const both = [
    { address: '127.0.0.1', family: 4 },
    { address: '::1', family: 6 },
  ];
  if (options?.all) process.nextTick(callback, null, both);
  else process.nextTick(callback, null, both[0].address, both[0].family);
  return undefined;
};
