/* pf.c - what one first touch of a fresh page costs in a fresh process: 64 anonymous pages
 * written once each (median of the per-page times), and a getcwd and an fstatat for scale. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static long long now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000LL+t.tv_nsec;}
static int cmp(const void *a,const void *b){long long x=*(const long long*)a,y=*(const long long*)b;return x<y?-1:x>y;}
int main(void){
  enum{N=64}; long long d[N]; char *p=mmap(NULL,N*4096,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  for(int i=0;i<N;i++){long long t=now(); p[i*4096]=1; d[i]=now()-t;}
  qsort(d,N,sizeof d[0],cmp);
  long long w[N]; for(int i=0;i<N;i++){long long t=now(); p[i*4096]=2; w[i]=now()-t;}
  qsort(w,N,sizeof w[0],cmp);
  char buf[4096]; long long c[16]; for(int i=0;i<16;i++){long long t=now(); if(!getcwd(buf,sizeof buf)) return 1; c[i]=now()-t;}
  qsort(c,16,sizeof c[0],cmp);
  struct stat st; long long s[16]; for(int i=0;i<16;i++){long long t=now(); fstatat(AT_FDCWD,"/tmp",&st,0); s[i]=now()-t;}
  qsort(s,16,sizeof s[0],cmp);
  printf("first touch %lld ns (min %lld, max %lld); touched again %lld ns; getcwd %lld ns; fstatat %lld ns\n",
         d[N/2],d[0],d[N-1],w[N/2],c[8],s[8]);
  return 0;
}
