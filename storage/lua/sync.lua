-- prelude: model
-- SYNC: fold the outcomes sent, and read the log after the caller's version.
-- ARGV: 1 incarnation, 2 known version, 3 fold, 4 limit
-- Reply: {'ok', version, folded, entries} | {'reload'} | {'gone'}
local version = num(meta, 'version')
if not reachable(version) then return {'reload'} end
fold(ARGV[3])
return {'ok', version, num(meta, 'folded'), catchup(known, version, tonumber(ARGV[4]))}
