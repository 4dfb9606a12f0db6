import collections,statistics,sys
for which in sys.argv[2:]:
  runs=[]; cur=[]
  for l in open(sys.argv[1]):
    p=l.split()
    if p[0]!='P' or p[1]!=which: continue
    k=' '.join(p[2:-2])
    if k=='read_request' and cur: runs.append(cur); cur=[]
    cur.append((k,int(p[-2]),int(p[-1])))
  runs.append(cur)
  n=statistics.mode([len(r) for r in runs])
  print('==', which, len(runs))
  for i in range(n):
    vals=[r[i][2] for r in runs if len(r)==n]; f=[r[i][1] for r in runs if len(r)==n]
    print('%-28s faults %4.1f  %8.2f us' % (runs[0][i][0], statistics.median(f), statistics.median(vals)/1000))
